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


SMAPS = """\
7f0000000000-7f0000001000 r--p 00000000 08:01 42                         /lib/bpe/_bindings.so
Rss:                   4 kB
Private_Clean:         4 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
VmFlags: rd mr mw me
7f0000001000-7f0000400000 r-xp 00001000 08:01 42                         /lib/bpe/_bindings.so
Rss:                1024 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
7f0000400000-7f0002800000 r--p 00400000 08:01 42                         /lib/bpe/_bindings.so
Rss:               36000 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
VmFlags: rd mr mw me
7f0002800000-7f0002810000 r--p 02800000 08:01 42                         /lib/bpe/_bindings.so
Rss:                  64 kB
Private_Dirty:        64 kB
Anonymous:            64 kB
VmFlags: rd mr mw me ac
7f0002810000-7f0002812000 rw-p 02810000 08:01 42                         /lib/bpe/_bindings.so
Rss:                   8 kB
Private_Dirty:         8 kB
Anonymous:             8 kB
VmFlags: rd wr mr mw me ac
7f0002900000-7f0002a00000 r--p 00000000 08:01 43                         /lib/bpe/_bindings.so.bak
Rss:                1024 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
7f0003000000-7f0003100000 rw-p 00000000 00:00 0
Rss:                1024 kB
Private_Dirty:      1024 kB
Anonymous:          1024 kB
"""


def test_only_the_file_s_clean_read_only_mappings_are_dropped():
    """Not the relocated (RELRO) one, the writable one, another file whose
    name starts the same, or anonymous memory."""
    assert tokenizer.clean_read_only_regions(SMAPS, "/lib/bpe/_bindings.so") == [
        (0x7F0000000000, 0x7F0000001000),
        (0x7F0000001000, 0x7F0000400000),
        (0x7F0000400000, 0x7F0002800000),
    ]
    assert tokenizer.clean_read_only_regions(SMAPS, "/lib/other.so") == []


def test_the_live_smaps_of_this_process_is_read():
    import os

    import re

    libc = next(line.split()[-1] for line in open("/proc/self/maps") if re.search(r"/libc[.-][^/]*$", line.strip()))
    found = tokenizer.clean_read_only_regions(open("/proc/self/smaps").read(), os.path.realpath(libc))
    assert found  # libc's text at least: mapped read-only, never written
