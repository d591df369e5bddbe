"""Scraping an endpoint over HTTP and reading it with prometheus_client's own parser."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of ``url``/metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float | None:
    """The sample ``name`` whose labels include ``labels`` (summed when several match), None when none."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls)]
    return sum(found) if found else None


def health(url: str) -> tuple[int, str]:
    """``/healthz``'s status code and body."""
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def assert_counters_grew(before: dict, after: dict) -> None:
    """Every counter sample (``_total``) of ``before`` is in ``after``, at least as large."""
    for key, was in before.items():
        if key[0].endswith("_total"):
            assert key in after, f"{key} disappeared"
            assert after[key] >= was, f"{key} fell from {was} to {after[key]}"
