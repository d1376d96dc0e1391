"""A seeded, fault-injecting simulator of HipsterShop + TiDB writing the real release
layout plus input.json and groundtruth.jsonl (see README.md). Never imported by the
diagnosis path."""
