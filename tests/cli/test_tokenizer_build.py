"""The sidecar builds the o200k tokenizer while it holds least, without the
``engines`` package, and gives back the vocabulary pages the build read."""

from __future__ import annotations

import json
import subprocess
import sys

from engines import tokens
from sidecar import tokenizer

PROBE = """
import json, os, sys
def backend_rss_kib():
    path, total, mine = sys.modules["bpe_openai._bindings"].__file__, 0, False
    path = os.path.realpath(path)
    for line in open("/proc/self/smaps"):
        fields = line.split()
        if fields and not fields[0].endswith(":"):
            mine = len(fields) >= 6 and fields[5] == path
        elif mine and fields[0] == "Rss:":
            total += int(fields[1])
    return total
from sidecar import tokenizer
{build}
out = {{"built": built, "engines": "engines" in sys.modules, "bpe_package": "bpe_openai" in sys.modules, "backend_rss_kib": backend_rss_kib()}}
from engines import tokens
out["same_backend"] = tokens._rust_backend() is sys.modules["bpe_openai._bindings"]
out["count"] = tokens.count_tokens("hello wörld, 日本語のテキスト " * 50)
print(json.dumps(out))
"""


def probe(build: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE.format(build=build)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_tokenizer_is_built_without_the_engines_package_and_engines_tokens_takes_it():
    got = probe("built = tokenizer.build()")
    assert got["built"] is True
    assert got["engines"] is False  # engines (~1.5 MB) comes after the build's peak
    assert got["bpe_package"] is False  # nor bpe-openai's __init__ (its tiktoken tables: ~75 MB)
    assert got["same_backend"] is True
    assert got["count"] == tokens.count_tokens("hello wörld, 日本語のテキスト " * 50)


def test_the_vocabulary_pages_the_build_read_are_given_back():
    """Built without the release, ~35 MB of bpe-openai's module stay resident."""
    kept = probe(
        "backend = tokenizer._backend()\n"
        "backend.tokenizer_for_encoding('o200k_base')\n"
        "built = True"
    )
    released = probe("built = tokenizer.build()")
    assert kept["backend_rss_kib"] > 20 * 1024
    assert released["backend_rss_kib"] < kept["backend_rss_kib"] - 20 * 1024
    assert released["count"] == kept["count"]  # and counting still works, on the same tokens


def test_releasing_pages_of_a_file_not_mapped_releases_nothing():
    assert tokenizer.release_clean_pages("/nonexistent/file.so") == 0


def test_the_backend_module_name_is_the_one_engines_tokens_uses():
    assert tokenizer.BACKEND_MODULE == tokens._BACKEND_MODULE
