"""The kinds of result record: one module a kind, each with KIND, compute(rec, meta), which returns
the record's figures from its logs (a dict whose "kind" is KIND), and table(rec_name, figures), the
markdown table a page quotes. Its docstring says what logs it reads and what figures it writes."""
from record_kinds import (ab_campaign, bench_matmul, compare_flex, default_job, peer_compare, peer_full_run, profile, scaling,
                          test_gpu)

KINDS = {m.KIND: m for m in (default_job, test_gpu, bench_matmul, ab_campaign, compare_flex, peer_compare, peer_full_run,
                             scaling, profile)}
