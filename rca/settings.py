"""The single Settings object.

Built once by the CLI (``load_settings``) and passed down; library code never reads
the environment or config files itself. Precedence, lowest first:
defaults < config file (``config/config.toml`` or ``--config``) < environment
(``RCA_<SECTION>__<KEY>``, e.g. ``RCA_LLM__LLM_MODEL``) < command-line flags.
"""
from __future__ import annotations

import json
import logging
import os
import tomllib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from rca.errors import InputError
from rca.timeutil import parse_duration

log = logging.getLogger(__name__)

ENV_PREFIX = "RCA_"
# Keys that moved: (old section, old key) -> (new section, new key). Still read, with a warning.
MOVED_KEYS: dict[tuple[str, str], tuple[str, str]] = {("preprocess", "baseline_minutes"): ("index", "baseline_minutes")}
DEFAULT_CONFIG_PATH = Path("config/config.toml")


# How `diagnose` decides: one prepared call, a ReAct loop, or a team of agents (docs/agentic.md).
DiagnoseMode = Literal["pipeline", "react", "team"]

# The embedded models shipped by PyPI packages (rca/llm/models.py describes each).
EmbeddedModel = Literal["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"]


def _duration(value: object) -> object:
    """``5m``, ``1h30m``, ``90s`` (``rca.timeutil.parse_duration``; ``0`` for none) as a timedelta;
    a number (seconds) or timedelta as pydantic reads it."""
    if isinstance(value, str):
        return timedelta(0) if value.strip() == "0" else parse_duration(value)
    return value


# A duration spelled as --since spells it (5m, 1h30m, 90s) in the config file, RCA_* variables and
# flags alike; pydantic's own spellings ("PT5M", "00:05:00") would differ between them.
Duration = Annotated[timedelta, BeforeValidator(_duration)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PathSettings(_Section):
    # What the tool makes lives under data/ of the working directory (git-ignored there):
    # raw telemetry, the evidence index, the knowledge store and the run records.
    data_dir: Path = Path("data/raw")
    index_dir: Path = Path("data/index")
    kb_dir: Path = Path("data/kb")  # the Chroma collection, rebuilt from the shipped documents
    runs_dir: Path = Path("data/runs")
    input_file: Path = Path("data/raw/input.json")
    # Assembled model files (~1 GB, rebuilt from the installed packages), the prompt prefix's
    # KV cache and the judge's keyword cache: rebuildable, and like everything the tool makes
    # inside the working directory (git-ignored), never in the user's home.
    cache_dir: Path = Path("data/cache")


class LLMSettings(_Section):
    # "embedded": llama.cpp in-process (xllamacpp) on a model shipped by PyPI packages.
    # "openai": any OpenAI-compatible endpoint (vLLM, DeepSeek, OpenAI ...).
    backend: Literal["embedded", "openai"] = "embedded"
    embedded_model: EmbeddedModel = "qwen2.5-coder-1.5b"
    openai_api_base: str = ""
    openai_api_key: str = ""  # "EMPTY" for a local vLLM
    llm_model: str = ""
    # json_schema where the server enforces it; json_object + schema in prompt (DeepSeek).
    response_format: Literal["json_schema", "json_object"] = "json_schema"
    n_ctx: int = 4096
    threads: int = Field(default_factory=lambda: os.cpu_count() or 2)
    timeout_s: float = 300.0
    max_retries: int = 3
    temperature: float = 0.0
    max_tokens: int = 400
    concurrency: int = 1
    # Embedded model: keep the KV cache of the prompt's static prefix on disk (paths.cache_dir),
    # so a new run's first case does not evaluate ~1.7k tokens again (~50 s on 2 cores).
    prefix_cache: bool = True


class EmbeddingSettings(_Section):
    model: Literal["all-minilm-l6-v2-int8"] = "all-minilm-l6-v2-int8"
    batch_size: int = 32


class KnowledgeSettings(_Section):
    collection: str = "sop"
    top_k: int = 2
    # SOP markdown directory; None = the documents shipped in the knowledge package.
    docs_dir: Path | None = None


class SystemSettings(_Section):
    # The system description (rca/system.py, docs/system.md): services, pods, nodes, call
    # chains, file time zone. None = the bundled HipsterShop one (rca/system.toml).
    file: Path | None = None


class ChallengeSettings(_Section):
    # The challenge rule version (rca/challenge.py): the answers' shape and the judge's scoring.
    rules: Literal["early", "late"] = "early"


class JudgeSettings(_Section):
    semantic_threshold: float = 0.6
    keyword_weight: float = 0.6
    similarity_weight: float = 0.4


class JudgeServerSettings(_Section):
    """The judge server (``rca judge serve``): database, quotas, request limits."""

    # SQLite file under data/ by default; PostgreSQL as postgresql+psycopg://user@host:port/db.
    db_url: str = "sqlite:///data/judge.sqlite"
    host: str = "127.0.0.1"
    port: int = 8080
    daily_quota: int = Field(default=10, ge=1)
    total_quota: int = Field(default=350, ge=1)
    # The day of the daily quota starts at midnight in this zone (the 2025 challenge ran on Beijing time).
    timezone: str = "Asia/Shanghai"
    # Per team, across POST / and /status: at most rate_max_requests in any rate_window_s seconds.
    rate_max_requests: int = Field(default=60, ge=1)
    rate_window_s: float = Field(default=60.0, gt=0)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_answers: int = Field(default=2000, ge=1)
    max_field_chars: int = Field(default=10000, ge=16)
    max_trace_steps: int = Field(default=200, ge=1)
    max_json_depth: int = Field(default=8, ge=4)
    # Semantic reason step (embedding model) in RCA scoring, as `rca judge rca` without --keyword-only.
    semantic: bool = True
    worker_poll_s: float = Field(default=0.5, gt=0)
    # A submission claimed longer ago than this by a worker that never finished is queued again.
    scoring_lease_s: float = Field(default=600.0, gt=0)


class DiagnoseSettings(_Section):
    top_candidates: int = 3
    # Offer the model one level per service: the best-ranked of a service and its pods
    # (the index's level logic picks which). The model then chooses among distinct
    # components instead of re-deciding service vs pod, which small models do poorly.
    one_level_per_service: bool = True
    max_prompt_tokens: int = 3000
    self_consistency: int = 1  # n samples with majority vote; 1 = off
    # A second turn settles the fault type of the chosen component, shown all of its
    # evidence and the SOP signal check of every type it can suffer (2 calls per case).
    # Off by default: with the embedded 1.5B model it kept its first choice in 18/18
    # benchmark cases and cost ~9 s a case (scripts/bench_diagnose.py).
    confirm_fault_type: bool = False
    # End the case prompt with the rules' reading (index top-1 + best SOP fit) and whether the
    # component or the fault type is a close call (diagnose/reading.py), so the model spends its
    # judgement where the rules are weakest. Off by default: on tuning seed 111 (randomised, 18
    # cases, embedded 1.5B) it scored 90.88 against 91.01 without it, and the model then followed
    # the rules in the one case where it had beaten them (docs/generalisation.md).
    show_rules_reading: bool = False
    close_score_ratio: float = Field(default=1.5, gt=1.0)  # top score below this multiple of the next: close
    close_fit_gap: float = Field(default=0.5, ge=0.0)  # best SOP fit within this of the next type: close
    # What the model chooses among. "candidates": every candidate and every fault type it can
    # suffer. "contenders": the candidates the rules cannot separate from the leader (within
    # close_score_ratio) and, for each, the fault types within close_fit_gap of its best SOP fit;
    # never fewer than min_contenders of each, so the model always makes the choice. All the
    # candidates' evidence is shown either way (diagnose/reading.py, docs/generalisation.md).
    # Default "contenders": on tuning seeds 111-112 (randomised, 54 cases) the model's answers
    # beat the rules-only ablation in both runs, and it can no longer pick a candidate several
    # times weaker than the leader, its most frequent costly override.
    decide_among: Literal["candidates", "contenders"] = "contenders"
    min_contenders: int = Field(default=2, ge=2)
    # Under "contenders": at most this many runbook look-alike notes saying how the open fault
    # types differ ("pod kill rather than pod failure: the pod is restarted within seconds..."),
    # placed right after the choice; 0 leaves them out.
    max_distinctions: int = Field(default=4, ge=0)
    # pipeline: one prepared call (best with a small local model); react: the model calls the
    # observation tools (diagnose/tools.py) in a loop; team: controller, metric/log/trace
    # specialists and a judge (docs/agentic.md compares the three).
    mode: DiagnoseMode = "pipeline"
    react_max_steps: int = Field(default=3, ge=1, le=12)  # model-chosen tool calls before the final answer
    team_max_rounds: int = Field(default=2, ge=1, le=4)  # judge send-backs + 1
    observation_chars: int = Field(default=1200, ge=200, le=8000)  # bound of one tool observation
    # `diagnose --detect`: a window is a fault when its strongest candidate scores above
    # this floor (calibrated on tuning seeds: `rca bench calibrate-detect`); within
    # +-detect_margin of it the model judges the evidence instead.
    detect_floor: float = 2.14  # rca bench calibrate-detect, seeds 101+102 (16 faults, 12 quiet): balanced acc 1.0
    detect_margin: float = 0.25
    # `diagnose --alerts` (diagnose/cases.py read_alerts). Alertmanager's startsAt is when the rule
    # fired, after its `for:` and a rate() window of evidence, so an alert's window opens alert_lead
    # before it. An alert still firing ends at the time its file says it was sent (API v2's
    # updatedAt; `--listen`: the time the payload was received), at most alert_span after its startsAt,
    # and there when nothing says (a saved webhook payload carries no such time).
    # 5m + 10m make a ~15-minute window, like the challenge's cases (median 16) the index is tuned on.
    alert_lead: Duration = Field(default=timedelta(minutes=5), ge=timedelta(0))
    alert_span: Duration = Field(default=timedelta(minutes=10), gt=timedelta(0))
    # `diagnose --listen HOST:PORT` (diagnose/receiver.py), Alertmanager's webhook receiver: the largest
    # POST /alerts body it reads (413 beyond; Alertmanager's payloads are a few KiB, max_alerts bounds them),
    # and how many cases may wait for the one worker (503 with Retry-After beyond: Alertmanager retries).
    listen_max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    listen_max_queue: int = Field(default=100, ge=1)
    # An alert fires before the telemetry of its last minutes is indexed (an import and `rca preprocess` run
    # every few minutes): a case waits up to listen_wait for the index to reach its end, then is diagnosed on
    # what the index holds (its answer's data status says what is missing). 0: never wait.
    listen_wait: Duration = Field(default=timedelta(minutes=5), ge=timedelta(0))
    # The receiver builds the index of [paths] data_dir for each case before it waits (the nightly job, incremental,
    # for the case's days): always with [sources] (after pulling them); without, when this is true, for telemetry
    # that reaches data_dir by itself (`rca import otlp --listen`, a collector's files) with no timer running
    # `rca preprocess`.
    listen_index: bool = False


class PreprocessSettings(_Section):
    workers: int = Field(default=1, ge=1)  # processes (>1: free partitions go to a pool of workers - 1)
    # Partitions built at once in this process with one worker (index/engine_local.py): a
    # second build fills the core the first leaves idle between its vectorised steps.
    threads: int = Field(default=2, ge=1)
    # Where partitions are built (index/engines.py): "local" (this machine) or "ray"
    # (a Ray cluster at ray_address, or a local one started for the run when it is empty).
    engine: Literal["local", "ray"] = "local"
    ray_address: str | None = None


class IndexSettings(_Section):
    """The evidence index's knobs; ``index.params.IndexParams.from_settings`` checks the tables.

    The detector and ranking tables hold overrides only: their defaults (and the list of
    valid keys) live with the code they tune (``preprocess.detect``, ``index.params``).
    """

    baseline_minutes: int = Field(default=30, ge=1)
    max_evidence: int = Field(default=12, ge=1)
    brief_window_minutes: int = Field(default=3, ge=0)
    metric: dict[str, float | int] = Field(default_factory=dict)
    log: dict[str, float | int] = Field(default_factory=dict)
    trace: dict[str, float | int] = Field(default_factory=dict)
    rank: dict[str, float | int] = Field(default_factory=dict)


def _items(value: object) -> object:
    """A list as the config file writes it; from an ``RCA_*`` variable (a string): a JSON array, else one item.

    Never split at commas: a PromQL or LogQL selector holds them (``{namespace="shop",app="cart"}``)."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return [value]
        return parsed if isinstance(parsed, list) else [value]
    return value


# A list of strings, which an RCA_* variable gives as one string (above).
Items = Annotated[list[str], BeforeValidator(_items)]


class _SourceSettings(_Section):
    """What every ``[sources.*]`` server needs: where it is, how long to wait, what headers to send."""

    url: str  # no default: a source is configured by naming its server
    timeout_s: float = Field(default=30.0, gt=0)
    # Sent with every request ("Authorization" = "Bearer ...", "X-Scope-OrgID" = "tenant"): the values are
    # secrets, never shown (SecretStr: a repr or a log of the settings prints '**********'), logged or saved.
    headers: dict[str, SecretStr] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            # Only the scheme is echoed: the URL may carry a password.
            raise ValueError(f"expected http(s)://HOST[:PORT][/PATH], got a {parts.scheme or 'schemeless'} URL")
        return url

    @field_validator("headers")
    @classmethod
    def _header_names(cls, headers: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for name in headers:  # the names only: the values may be secrets
            if not name.strip() or any(c.isspace() or c == ":" for c in name):
                raise ValueError(f"header name {name!r}: expected a name such as Authorization (no space, no ':')")
        return headers

    def header_values(self) -> dict[str, str]:
        """The headers to send, secrets revealed: for the HTTP client only."""
        return {name: value.get_secret_value() for name, value in self.headers.items()}


class PrometheusSource(_SourceSettings):
    # As `rca import prometheus --preset ... --match ... --rate-window ... --query ...` (docs/formats/prometheus.md).
    presets: Items = Field(default_factory=list)
    match: Items = Field(default_factory=list)
    rate_window: Duration = Field(default=timedelta(minutes=1), gt=timedelta(0))
    queries: Items = Field(default_factory=list)

    @model_validator(mode="after")
    def _something_to_pull(self) -> PrometheusSource:
        if not self.presets and not self.queries:
            raise ValueError("give presets (kubernetes, istio, spanmetrics or a file) or queries (PromQL) to pull")
        if self.match and not self.presets:
            raise ValueError("match scopes the queries of presets; write the matchers into your queries")
        return self


class LokiSource(_SourceSettings):
    queries: Items = Field(min_length=1)  # LogQL log queries, '{namespace="shop"}'


class JaegerSource(_SourceSettings):
    services: Items = Field(default_factory=list)  # empty: every service the server knows


class ZipkinSource(_SourceSettings):
    # As `rca import zipkin --url ... --service ... --limit ...`: the traces that began in the range.
    services: Items = Field(default_factory=list)  # empty: every trace, whatever its services
    limit: int = Field(default=1000, ge=1)  # traces a request; a time chunk that returns this many is split


class ElasticsearchSource(_SourceSettings):
    # As `rca import ecs --url ... --index ... --query ...`: ECS log documents from Elasticsearch or OpenSearch.
    index: str = Field(min_length=1)  # an index, pattern or list: "filebeat-*", "logs-*"
    query: str | None = None  # Lucene query string syntax: 'kubernetes.namespace:"shop"'; none: every document
    limit: int = Field(default=5000, ge=1, le=10_000)  # documents a request (index.max_result_window: 10,000)


class TempoSource(_SourceSettings):
    query: str = Field(default="{}", min_length=2)  # TraceQL: the traces to pull ("{}": every trace)
    limit: int = Field(default=500, ge=1)  # trace ids per search; a time chunk that finds this many is split


class SourcesSettings(_Section):
    """The telemetry servers `rca import sources` and `rca diagnose --listen` pull from; none: nothing to pull."""

    prometheus: PrometheusSource | None = None
    loki: LokiSource | None = None
    jaeger: JaegerSource | None = None
    zipkin: ZipkinSource | None = None
    tempo: TempoSource | None = None
    elasticsearch: ElasticsearchSource | None = None

    def configured(self) -> list[str]:
        """The names of the sources given, in pull order."""
        return [name for name in ("prometheus", "loki", "elasticsearch", "jaeger", "zipkin", "tempo")
                if getattr(self, name) is not None]


class Settings(_Section):
    paths: PathSettings = PathSettings()
    llm: LLMSettings = LLMSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    knowledge: KnowledgeSettings = KnowledgeSettings()
    system: SystemSettings = SystemSettings()
    challenge: ChallengeSettings = ChallengeSettings()
    judge: JudgeSettings = JudgeSettings()
    judge_server: JudgeServerSettings = JudgeServerSettings()
    diagnose: DiagnoseSettings = DiagnoseSettings()
    preprocess: PreprocessSettings = PreprocessSettings()
    index: IndexSettings = IndexSettings()
    sources: SourcesSettings = SourcesSettings()


class SettingsError(InputError):
    """Configuration that cannot be used; the message names the source and field."""


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _migrate(layer: dict[str, Any], *, source: str) -> dict[str, Any]:
    """``layer`` with moved keys at their new place (a value already there wins), each move logged."""
    for (old_section, old_key), (new_section, new_key) in MOVED_KEYS.items():
        section = layer.get(old_section)
        if not isinstance(section, Mapping) or old_key not in section:
            continue
        log.warning("%s: setting '%s.%s' moved to '%s.%s'; please rename it", source, old_section, old_key,
                    new_section, new_key)
        layer = {**layer, old_section: {k: v for k, v in section.items() if k != old_key}}
        target = dict(layer.get(new_section) or {})
        target.setdefault(new_key, section[old_key])
        layer[new_section] = target
    return layer


def _env_layer(environ: Mapping[str, str]) -> dict[str, Any]:
    """``RCA_<SECTION>__<KEY>`` values; each further ``__`` goes one table deeper
    (``RCA_SOURCES__LOKI__HEADERS__AUTHORIZATION`` is ``[sources.loki.headers] authorization``)."""
    layer: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        *tables, key = name[len(ENV_PREFIX):].lower().split("__")
        target = layer
        for table in tables:
            nested = target.setdefault(table, {})
            if not isinstance(nested, dict):  # RCA_A__B and RCA_A__B__C: the deeper one is a table
                nested = target[table] = {}
            target = nested
        target[key] = value
    return layer


def _origin(layers: list[tuple[str, dict[str, Any]]], loc: tuple[Any, ...]) -> str:
    """The last layer that wrote anything under the table holding ``loc`` (where a missing key was expected)."""
    for source, layer in reversed(layers):
        node: Any = layer
        for part in loc[:-1]:
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping) and node:
            return source
    return layers[-1][0]


def load_settings(
    *,
    config_path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Settings:
    """Build Settings from defaults, a TOML file, ``RCA_*`` variables and flag overrides.

    ``config_path=None`` uses ``config/config.toml`` when it exists. Overrides whose
    value is ``None`` (flags not given) are ignored.
    """
    layers: list[tuple[str, dict[str, Any]]] = []
    path = config_path or DEFAULT_CONFIG_PATH
    if config_path is not None and not path.exists():
        raise SettingsError(f"{path}: config file not found")
    if path.exists():
        try:
            layers.append((str(path), tomllib.loads(path.read_text(encoding="utf-8"))))
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"{path}: invalid TOML: {exc}") from exc
    layers.append(("environment", _env_layer(os.environ if environ is None else environ)))
    flag_layer = {
        section: {k: v for k, v in values.items() if v is not None}
        for section, values in (overrides or {}).items()
    }
    layers.append(("command line", flag_layer))

    merged: dict[str, Any] = {}
    seen: list[tuple[str, dict[str, Any]]] = []
    for number, (source, layer) in enumerate(layers, start=1):
        layer = _migrate(layer, source=source)
        seen.append((source, layer))
        merged = _deep_merge(merged, layer)
        try:
            Settings.model_validate(merged)
        except ValidationError as exc:
            errors = exc.errors()
            if number < len(layers):
                # A key a table needs (a source's url) may come from a later layer: the file gives the
                # source, the environment its url. Only the full merge can say it is missing.
                errors = [e for e in errors if e["type"] != "missing"]
                if not errors:
                    continue
            first = errors[0]
            where = ".".join(str(p) for p in first["loc"])
            named = _origin(seen, tuple(first["loc"])) if first["type"] == "missing" else source
            raise SettingsError(f"{named}: setting '{where}': {first['msg']}") from exc
    return Settings.model_validate(merged)
