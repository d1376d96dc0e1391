"""Static shape of the simulated system: pods, nodes, IPs, ports and the request templates.

A request template is the span tree one k6 request produces (data-contract §7 and §8):
each node is either a server span of the service handling the call or a client span
of the caller. Client-only services (adservice, currencyservice, paymentservice) get a
client span with no server child; redis calls are spans whose process is ``redis``.
Durations are typical means in µs; the request generator adds noise and fault effects.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from rca.taxonomy import APP_SERVICES, CLIENT_ONLY_SERVICES

WORKER_NODES: tuple[str, ...] = tuple(f"aiops-k8s-{i:02d}" for i in range(1, 9))
MASTER_NODES: tuple[str, ...] = ("k8s-master1", "k8s-master2", "k8s-master3")
ALL_NODES: tuple[str, ...] = WORKER_NODES + MASTER_NODES
NODE_IP: dict[str, str] = {n: f"10.0.0.{i + 11}" for i, n in enumerate(ALL_NODES)}

PODS_PER_SERVICE = 3
APP_PODS: tuple[str, ...] = tuple(f"{s}-{i}" for s in APP_SERVICES for i in range(PODS_PER_SERVICE))
TIDB_PODS: tuple[str, ...] = ("tidb-tidb-0", "tidb-pd-0", "tidb-tikv-0")
ALL_PODS: tuple[str, ...] = APP_PODS + ("redis-cart-0",) + TIDB_PODS
# Pods that have APM files (the TiDB cluster is monitored by its own exporters instead).
APM_PODS: tuple[str, ...] = APP_PODS + ("redis-cart-0",)
APM_SERVICES: tuple[str, ...] = APP_SERVICES + ("redis-cart",)

SERVICE_PORT: dict[str, int] = {
    "adservice": 9555, "cartservice": 7070, "checkoutservice": 5050, "currencyservice": 7000,
    "emailservice": 5000, "frontend": 8080, "paymentservice": 50051, "productcatalogservice": 3550,
    "recommendationservice": 8080, "shippingservice": 50051, "redis-cart": 6379,
    "tidb-tidb": 4000, "tidb-pd": 2379, "tidb-tikv": 20160,
}
DNS_SERVER = "10.233.33.139:53"


def pods_of(service: str) -> tuple[str, ...]:
    if service == "redis-cart":
        return ("redis-cart-0",)
    if service.startswith("tidb-"):
        return (f"{service}-0",)
    return tuple(f"{service}-{i}" for i in range(PODS_PER_SERVICE))


def pod_ip(pod: str) -> str:
    """Stable cluster IP of a pod (10.233.x.y), derived from its name."""
    h = zlib.crc32(pod.encode())
    return f"10.233.{64 + h % 60}.{2 + (h >> 8) % 250}"


def service_ip(service: str) -> str:
    h = zlib.crc32(("svc/" + service).encode())
    return f"10.233.{h % 60}.{2 + (h >> 8) % 250}"


@dataclass(frozen=True)
class SpanNode:
    """One span of a request template; ``parent`` indexes an earlier node (-1 for the root)."""

    parent: int
    service: str  # process.serviceName (``redis`` for redis spans)
    kind: str  # server | client
    operation: str
    callee: str  # service being called (the span's own service for server spans)
    mean_us: float  # own time: processing (server) or network/sidecar overhead (client)
    # A client span whose failure its caller shrugs off: the handler goes on (and answers fine)
    # without it. HipsterShop's code: frontend renders pages without ads, and its product page
    # without recommendations; checkout places the order whether the cart empties and the
    # confirmation mail goes out or not.
    tolerated: bool = False


@dataclass(frozen=True)
class RequestTemplate:
    name: str
    method: str
    path: str
    status: int  # normal HTTP status of the frontend response (POSTs redirect with 302)
    weight: float
    nodes: tuple[SpanNode, ...]


class _Builder:
    """Builds a template's node list in parent-before-child order."""

    def __init__(self, root_op: str, root_us: float) -> None:
        self.nodes: list[SpanNode] = [SpanNode(-1, "frontend", "server", root_op, "frontend", root_us)]

    def call(self, parent: int, caller: str, callee: str, operation: str, client_us: float,
             server_us: float, server_op: str | None = None, tolerated: bool = False) -> int:
        """Add a client span (and the callee's server span unless client-only); return the server index."""
        self.nodes.append(SpanNode(parent, caller, "client", operation, callee, client_us, tolerated))
        client = len(self.nodes) - 1
        if callee in CLIENT_ONLY_SERVICES:
            # The callee's own processing is folded into the client span.
            self.nodes[client] = SpanNode(parent, caller, "client", operation, callee, client_us + server_us,
                                          tolerated)
            return client
        self.nodes.append(SpanNode(client, callee, "server", server_op or operation, callee, server_us))
        return len(self.nodes) - 1

    def redis(self, parent: int, command: str) -> None:
        self.nodes.append(SpanNode(parent, "redis", "client", command, "redis-cart", 1700.0))


def _get_cart(b: _Builder, parent: int, caller: str, op: str = "GetCart") -> None:
    server = b.call(parent, caller, "cartservice", f"hipstershop.CartService/{op}", 1500.0, 400.0,
                    server_op=f"POST /hipstershop.CartService/{op}", tolerated=op == "EmptyCart")
    if op in ("GetCart", "AddItem"):
        b.redis(server, "HGET")
    if op in ("AddItem", "EmptyCart"):
        b.redis(server, "HMSET")


def _recommend(b: _Builder, parent: int, *, tolerated: bool = False) -> None:
    server = b.call(parent, "frontend", "recommendationservice", "hipstershop.RecommendationService/ListRecommendations",
                    9000.0, 100000.0, server_op="/hipstershop.RecommendationService/ListRecommendations",
                    tolerated=tolerated)
    b.call(server, "recommendationservice", "productcatalogservice",
           "/hipstershop.ProductCatalogService/ListProducts", 9000.0, 72.0,
           server_op="hipstershop.ProductCatalogService/ListProducts")


def _catalog(b: _Builder, parent: int, caller: str, op: str, client_us: float = 10900.0) -> None:
    b.call(parent, caller, "productcatalogservice", f"hipstershop.ProductCatalogService/{op}", client_us, 90.0)


def _currency(b: _Builder, parent: int, caller: str, op: str) -> None:
    b.call(parent, caller, "currencyservice", f"hipstershop.CurrencyService/{op}", 1800.0, 600.0)


def _ads(b: _Builder, parent: int) -> None:
    b.call(parent, "frontend", "adservice", "hipstershop.AdService/GetAds", 2200.0, 900.0, tolerated=True)


def _quote(b: _Builder, parent: int, caller: str) -> None:
    b.call(parent, caller, "shippingservice", "hipstershop.ShippingService/GetQuote", 4800.0, 210.0)


def build_templates() -> tuple[RequestTemplate, ...]:
    """The k6 request mix: home, product page, cart view, add to cart, checkout, set currency."""
    templates: list[RequestTemplate] = []

    b = _Builder("GET /", 3000.0)
    _currency(b, 0, "frontend", "GetSupportedCurrencies")
    _catalog(b, 0, "frontend", "ListProducts")
    _get_cart(b, 0, "frontend")
    _currency(b, 0, "frontend", "Convert")
    _ads(b, 0)
    templates.append(RequestTemplate("home", "GET", "/", 200, 0.20, tuple(b.nodes)))

    b = _Builder("GET /product/{id}", 3000.0)
    _catalog(b, 0, "frontend", "GetProduct")
    _currency(b, 0, "frontend", "GetSupportedCurrencies")
    _get_cart(b, 0, "frontend")
    _currency(b, 0, "frontend", "Convert")
    _recommend(b, 0, tolerated=True)
    _ads(b, 0)
    templates.append(RequestTemplate("product", "GET", "/product/{id}", 200, 0.40, tuple(b.nodes)))

    b = _Builder("GET /cart", 3000.0)
    _currency(b, 0, "frontend", "GetSupportedCurrencies")
    _get_cart(b, 0, "frontend")
    _recommend(b, 0)
    _quote(b, 0, "frontend")
    _currency(b, 0, "frontend", "Convert")
    _catalog(b, 0, "frontend", "GetProduct")
    templates.append(RequestTemplate("view_cart", "GET", "/cart", 200, 0.15, tuple(b.nodes)))

    b = _Builder("POST /cart", 2000.0)
    _catalog(b, 0, "frontend", "GetProduct")
    _get_cart(b, 0, "frontend", "AddItem")
    templates.append(RequestTemplate("add_to_cart", "POST", "/cart", 302, 0.15, tuple(b.nodes)))

    b = _Builder("POST /cart/checkout", 4000.0)
    _currency(b, 0, "frontend", "GetSupportedCurrencies")
    order = b.call(0, "frontend", "checkoutservice", "hipstershop.CheckoutService/PlaceOrder", 6000.0, 50000.0)
    _get_cart(b, order, "checkoutservice")
    _catalog(b, order, "checkoutservice", "GetProduct", client_us=7000.0)
    _currency(b, order, "checkoutservice", "Convert")
    _quote(b, order, "checkoutservice")
    _currency(b, order, "checkoutservice", "Convert")
    b.call(order, "checkoutservice", "paymentservice", "hipstershop.PaymentService/Charge", 12000.0, 2000.0)
    b.call(order, "checkoutservice", "shippingservice", "hipstershop.ShippingService/ShipOrder", 13800.0, 210.0)
    _get_cart(b, order, "checkoutservice", "EmptyCart")
    b.call(order, "checkoutservice", "emailservice", "hipstershop.EmailService/SendOrderConfirmation", 6000.0,
           700.0, server_op="/hipstershop.EmailService/SendOrderConfirmation", tolerated=True)
    templates.append(RequestTemplate("checkout", "POST", "/cart/checkout", 200, 0.07, tuple(b.nodes)))

    b = _Builder("POST /setCurrency", 1500.0)
    templates.append(RequestTemplate("set_currency", "POST", "/setCurrency", 302, 0.03, tuple(b.nodes)))
    return tuple(templates)


TEMPLATES: tuple[RequestTemplate, ...] = build_templates()


@dataclass(frozen=True)
class Placement:
    """Which node hosts each pod during one CST day; one pod may move once (``moved``)."""

    day: str
    node_of: dict[str, str]
    moved_pod: str
    moved_from: str
    move_minute: int  # minute index of the CST day at which the pod is rescheduled

    def node_at(self, pod: str, minute_of_day: np.ndarray | int) -> np.ndarray | str:
        """Hosting node of ``pod`` at CST minute(s) of the day."""
        if pod != self.moved_pod:
            if isinstance(minute_of_day, np.ndarray):
                return np.full(minute_of_day.shape, self.node_of[pod], dtype=object)
            return self.node_of[pod]
        if isinstance(minute_of_day, np.ndarray):
            return np.where(minute_of_day < self.move_minute, self.moved_from, self.node_of[pod]).astype(object)
        return self.moved_from if minute_of_day < self.move_minute else self.node_of[pod]


def place_pods(*, rng: np.random.Generator, day: str, first_minute: int = 0) -> Placement:
    """Spread pods over the eight workers (pods move between nodes from day to day)."""
    nodes = np.array(WORKER_NODES)
    order = rng.permutation(len(ALL_PODS))
    node_of = {ALL_PODS[i]: str(nodes[k % len(nodes)]) for k, i in enumerate(order)}
    moved = APP_PODS[int(rng.integers(len(APP_PODS)))]
    others = [n for n in WORKER_NODES if n != node_of[moved]]
    moved_from = others[int(rng.integers(len(others)))]
    # Rescheduled soon after the first simulated minute of the day (``first_minute``), so the
    # old incarnation (the `deleted` file) is short but always present.
    return Placement(day=day, node_of=node_of, moved_pod=moved, moved_from=moved_from,
                     move_minute=first_minute + int(rng.integers(5, 50)))
