"""Engine discovery and loading through real entry points.

Each test builds throwaway distributions in a temp dir: a ``*.dist-info``
folder (METADATA + entry_points.txt) next to the engine's module, with the
dir put on ``sys.path``.  importlib.metadata then discovers them exactly as it
would an installed package; nothing is pip-installed.
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import itertools
import logging
import subprocess
import sys
import textwrap
import warnings

import pytest

import engines
from engines import EngineLoadError, LegacyEngine, list_engines, load_engine, load_engine_or_legacy
from engines.testkit import RecordingEngine

GROUP = "openclaw.context_engines"
_counter = itertools.count()

GOOD_ENGINE = """
from engines import AssembleResult, BaseContextEngine, CompactResult, EngineInfo, IngestResult

class Engine(BaseContextEngine):
    def __init__(self, config):
        super().__init__(config)
        self.received = config
        self.info = EngineInfo(id=config.get("id", "{id}"), name="Good", version="1.2.3")
        config["mutated"] = True  # must not leak back to the caller

    async def ingest(self, params):
        return IngestResult(ingested=True)

    async def assemble(self, params):
        return AssembleResult(messages=params.messages, estimated_tokens=0)

    async def compact(self, params):
        return CompactResult(ok=True, compacted=False)

def make(config):
    return Engine(config)
"""


@pytest.fixture
def make_dist(tmp_path, monkeypatch):
    """Create a discoverable distribution; returns a function building one.

    ``make(name, version, entry_points={id: "module:attr"}, modules={name: source})``.
    Module names get a unique suffix (``{mod}`` in values and sources is
    replaced by it) so that cached imports from one test never leak into another.
    """
    created_modules: list[str] = []
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(name, version="1.0", entry_points=None, modules=None):
        base = tmp_path
        suffix = f"_{next(_counter)}"
        mod = f"eng_{name.replace('-', '_').replace('.', '_').lower()}{suffix}"
        for module_name, source in (modules or {}).items():
            real = module_name.replace("{mod}", mod)
            created_modules.append(real)
            (base / f"{real}.py").write_text(textwrap.dedent(source))
        dist_info = base / f"{name.replace('-', '_')}-{version}.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        lines = [f"[{GROUP}]"] + [f"{eid} = {value.replace('{mod}', mod)}" for eid, value in (entry_points or {}).items()]
        (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        importlib.invalidate_caches()
        return mod

    yield make
    for module_name in created_modules:
        sys.modules.pop(module_name, None)
    importlib.invalidate_caches()


def good_dist(make_dist, name="good-engine", engine_id="good", version="1.0"):
    return make_dist(
        name,
        version,
        entry_points={engine_id: "{mod}:make"},
        modules={"{mod}": GOOD_ENGINE.replace("{id}", engine_id)},
    )


# ---------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------


def test_list_engines_finds_real_entry_points(make_dist):
    mod = good_dist(make_dist, name="Good_Engine", version="2.5")
    entries = {e.id: e for e in list_engines()}
    assert entries["good"].distribution == "Good_Engine"
    assert entries["good"].version == "2.5"
    assert entries["good"].value == f"{mod}:make"
    assert entries["good"].builtin is False
    assert entries["legacy"].builtin is True
    assert entries["legacy"].distribution == engines.BUILTIN_DISTRIBUTION
    assert entries["legacy"].value == "engines.legacy:LegacyEngine"


def test_list_engines_does_not_import_engines(make_dist):
    make_dist("lazy", entry_points={"lazy": "{mod}:make"}, modules={"{mod}": "raise RuntimeError('imported')\n"})
    assert "lazy" in {e.id for e in list_engines()}


def test_list_engines_shows_every_distribution_of_a_shared_id(make_dist):
    good_dist(make_dist, name="one", engine_id="shared")
    good_dist(make_dist, name="two", engine_id="shared")
    assert sorted(e.distribution for e in list_engines() if e.id == "shared") == ["one", "two"]


# ---------------------------------------------------------------------------
# Loading and trust
# ---------------------------------------------------------------------------


def test_load_engine_from_entry_point_with_allowlist(make_dist):
    good_dist(make_dist, name="good-engine")
    config = {"threshold": 3}
    # PEP 503 normalisation: the allowlist spelling need not match exactly
    engine = load_engine("good", config, allowlist=["Good_Engine"])
    assert engine.info.id == "good" and engine.info.version == "1.2.3"
    assert engine.received["threshold"] == 3
    assert config == {"threshold": 3}, "the factory got a copy, not the caller's mapping"
    assert not engines.is_legacy(engine)


def test_allowlist_refuses_untrusted_distribution(make_dist):
    good_dist(make_dist, name="sneaky-engine")
    with pytest.raises(EngineLoadError, match="sneaky-engine") as info:
        load_engine("good", allowlist=["some-other-dist"])
    assert "allowlist" in str(info.value)
    with pytest.raises(EngineLoadError, match="allowlist"):
        load_engine("good", allowlist=[])


def test_refused_distribution_is_never_imported(make_dist):
    make_dist("untrusted", entry_points={"u": "{mod}:make"}, modules={"{mod}": "raise SystemExit('imported!')\n"})
    with pytest.raises(EngineLoadError, match="untrusted"):
        load_engine("u", allowlist=())


def test_no_allowlist_trusts_all_but_warns(make_dist, caplog):
    good_dist(make_dist, name="free-engine")
    with caplog.at_level(logging.WARNING, logger="engines.loader"):
        engine = load_engine("good")
    assert engine.info.id == "good"
    assert any("no engine allowlist" in r.getMessage() and "free-engine" in r.getMessage() for r in caplog.records)


def test_builtin_is_always_trusted():
    engine = load_engine("legacy", allowlist=[])
    assert isinstance(engine, LegacyEngine)
    assert engines.is_legacy(engine)


@pytest.mark.parametrize("engine_id", ["legacy", "transcript-budget"])
def test_builtin_id_cannot_be_shadowed_and_no_entry_point_is_read_for_it(make_dist, monkeypatch, engine_id):
    """The built-in is loaded without reading any distribution's entry points
    (importlib.metadata: ~15 ms of each session's start); `engines` and
    `doctor` are where an impostor shows."""
    mod = good_dist(make_dist, name="impostor", engine_id=engine_id)

    def unread(*_args):
        raise AssertionError("entry points read for a built-in id")

    monkeypatch.setattr("engines.loader._discover", unread)
    engine = load_engine(engine_id)  # no allowlist: the impostor would be trusted
    assert type(engine).__module__.startswith("engines.") and engine.info.id == engine_id
    assert mod not in sys.modules


def test_a_built_in_engine_loads_without_importlib_metadata():
    code = (
        "import sys; before = set(sys.modules); from engines import load_engine; e = load_engine('lossless', {}); "
        "print('importlib.metadata' in set(sys.modules) - before, e.info.version)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", installed_version()]


def installed_version() -> str:
    try:
        return importlib.metadata.version(engines.BUILTIN_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # a bare checkout
        return "0+unknown"


def test_the_built_ins_are_the_entry_points_the_distribution_declares():
    """What `engines` lists (the metadata) and what sessions load (the table)."""
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(engines.__file__).parent.parent / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"][engines.ENTRY_POINT_GROUP] == dict(engines.BUILTIN_ENGINES)


def test_the_built_in_version_is_importlib_metadata_s_or_a_marker(monkeypatch, tmp_path):
    from engines import legacy

    legacy._builtin_version.cache_clear()
    try:
        assert legacy._builtin_version() == installed_version()
        legacy._builtin_version.cache_clear()
        (tmp_path / "openclaw_codex_sidecar-9.8.7.dist-info").mkdir()
        monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), str(tmp_path)])
        assert legacy._builtin_version() == "9.8.7"
        legacy._builtin_version.cache_clear()
        monkeypatch.setattr(sys, "path", [str(tmp_path / "missing")])
        assert legacy._builtin_version() == "0+unknown"
    finally:
        legacy._builtin_version.cache_clear()


def test_unknown_engine_id(make_dist):
    good_dist(make_dist)
    with pytest.raises(EngineLoadError, match="no context engine 'nope'") as info:
        load_engine("nope")
    assert "good" in str(info.value) and "legacy" in str(info.value)


@pytest.mark.parametrize("bad_id", ["", None, 3])
def test_invalid_engine_id(bad_id):
    with pytest.raises(EngineLoadError):
        load_engine(bad_id)


def test_ambiguous_id_across_trusted_distributions(make_dist):
    good_dist(make_dist, name="first", engine_id="dup")
    good_dist(make_dist, name="second", engine_id="dup")
    with pytest.raises(EngineLoadError, match="more than one") as info:
        load_engine("dup")
    assert "first" in str(info.value) and "second" in str(info.value)
    # the allowlist disambiguates
    assert load_engine("dup", allowlist=["second"]).info.id == "dup"


# ---------------------------------------------------------------------------
# Broken engines
# ---------------------------------------------------------------------------


def test_factory_that_raises(make_dist):
    make_dist(
        "broken",
        entry_points={"broken": "{mod}:make"},
        modules={"{mod}": "def make(config):\n    raise KeyError('api_key')\n"},
    )
    with pytest.raises(EngineLoadError, match="factory .* failed: KeyError") as info:
        load_engine("broken")
    assert isinstance(info.value.__cause__, KeyError)


def test_module_that_fails_to_import(make_dist):
    make_dist("noimport", entry_points={"noimport": "{mod}:make"}, modules={"{mod}": "import does_not_exist_xyz\n"})
    with pytest.raises(EngineLoadError, match="cannot import") as info:
        load_engine("noimport")
    assert isinstance(info.value.__cause__, ImportError)


def test_entry_point_naming_a_missing_attribute(make_dist):
    make_dist("noattr", entry_points={"noattr": "{mod}:nothing_here"}, modules={"{mod}": "x = 1\n"})
    with pytest.raises(EngineLoadError, match="cannot import"):
        load_engine("noattr")


def test_factory_that_is_not_callable(make_dist):
    make_dist("notcallable", entry_points={"nc": "{mod}:FACTORY"}, modules={"{mod}": "FACTORY = 42\n"})
    with pytest.raises(EngineLoadError, match="callable"):
        load_engine("nc")


def test_async_factory_is_refused_without_leaking_a_coroutine(make_dist):
    make_dist(
        "asyncfactory",
        entry_points={"af": "{mod}:make"},
        modules={"{mod}": "async def make(config):\n    return None\n"},
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(EngineLoadError, match="async"):
            load_engine("af")
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]


WRONG_SHAPES = {
    "no_info": (
        """
        class E:
            async def ingest(self, p): ...
            async def assemble(self, p): ...
            async def compact(self, p): ...
        """,
        ["info"],
    ),
    "info_without_version": (
        """
        class Info:
            id = "shape"
            name = "Shape"
        class E:
            info = Info()
            async def ingest(self, p): ...
            async def assemble(self, p): ...
            async def compact(self, p): ...
        """,
        ["info.version"],
    ),
    "empty_id_bad_mode": (
        """
        from engines import EngineInfo
        class E:
            info = EngineInfo(id="", name="Shape", version="1", turn_maintenance_mode="sometimes")
            async def ingest(self, p): ...
            async def assemble(self, p): ...
            async def compact(self, p): ...
        """,
        ["info.id", "turn_maintenance_mode"],
    ),
    "sync_and_missing_methods": (
        """
        from engines import EngineInfo
        class E:
            info = EngineInfo(id="shape", name="Shape", version="1")
            def ingest(self, p): ...
            async def assemble(self, p): ...
        """,
        ["ingest() must be an async", "compact() is missing"],
    ),
    "sync_optional_method": (
        """
        from engines import EngineInfo
        class E:
            info = EngineInfo(id="shape", name="Shape", version="1")
            async def ingest(self, p): ...
            async def assemble(self, p): ...
            async def compact(self, p): ...
            def after_turn(self, p): ...
        """,
        ["after_turn() must be async"],
    ),
    "info_property_raises": (
        """
        class E:
            @property
            def info(self):
                raise RuntimeError("not ready")
            async def ingest(self, p): ...
            async def assemble(self, p): ...
            async def compact(self, p): ...
        """,
        ["not ready"],
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG_SHAPES))
def test_wrong_shape_is_refused_with_every_problem_listed(make_dist, case):
    source, expected = WRONG_SHAPES[case]
    source = textwrap.dedent(source) + "\ndef make(config):\n    return E()\n"
    make_dist("shape", entry_points={"shape": "{mod}:make"}, modules={"{mod}": source})
    with pytest.raises(EngineLoadError) as info:
        load_engine("shape")
    message = str(info.value)
    assert "shape" in message
    for fragment in expected:
        assert fragment in message


def test_engine_with_optional_methods_set_to_none_is_valid(make_dist):
    source = """
    from engines import EngineInfo
    class E:
        info = EngineInfo(id="sparse", name="Sparse", version="1")
        after_turn = None
        async def ingest(self, p): ...
        async def assemble(self, p): ...
        async def compact(self, p): ...
    def make(config):
        return E()
    """
    make_dist("sparse", entry_points={"sparse": "{mod}:make"}, modules={"{mod}": source})
    engine = load_engine("sparse")
    assert not engines.implements(engine, "after_turn")


def test_info_id_mismatch_only_warns(make_dist, caplog):
    make_dist(
        "alias",
        entry_points={"alias": "{mod}:make"},
        modules={"{mod}": GOOD_ENGINE.replace("{id}", "real-id")},
    )
    with caplog.at_level(logging.WARNING, logger="engines.loader"):
        engine = load_engine("alias", allowlist=["alias"])
    assert engine.info.id == "real-id"
    assert any("real-id" in r.getMessage() for r in caplog.records)


def test_testkit_engine_loads_through_an_entry_point_with_config(make_dist):
    make_dist("testkit-user", entry_points={"rec": "engines.testkit:RecordingEngine"})
    engine = load_engine("rec", {"id": "rec", "omit": ["after_turn"]}, allowlist=["testkit-user"])
    assert isinstance(engine, RecordingEngine)
    assert not engines.implements(engine, "after_turn")
    assert engines.implements(engine, "ingest_batch")


# ---------------------------------------------------------------------------
# Legacy fallback
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("engine_id", [None, "", "legacy"])
def test_or_legacy_selects_legacy_quietly(engine_id, caplog):
    with caplog.at_level(logging.WARNING):
        engine = load_engine_or_legacy(engine_id)
    assert isinstance(engine, LegacyEngine)
    assert caplog.records == []


def test_or_legacy_returns_the_engine_when_it_loads(make_dist):
    good_dist(make_dist, name="fine")
    engine = load_engine_or_legacy("good", {"id": "good"}, allowlist=["fine"])
    assert engine.info.id == "good"
    assert not isinstance(engine, LegacyEngine)


@pytest.mark.parametrize("scenario", ["unknown", "refused", "broken"])
def test_or_legacy_falls_back_loudly(make_dist, caplog, scenario):
    make_dist(
        "broken2",
        entry_points={"broken": "{mod}:make"},
        modules={"{mod}": "def make(config):\n    raise ValueError('bad config')\n"},
    )
    good_dist(make_dist, name="untrusted2")
    engine_id, allowlist, reason = {
        "unknown": ("missing-engine", None, "no context engine"),
        "refused": ("good", ["nobody"], "allowlist"),
        "broken": ("broken", None, "bad config"),
    }[scenario]
    with caplog.at_level(logging.WARNING, logger="engines.loader"):
        engine = load_engine_or_legacy(engine_id, {"x": 1}, allowlist=allowlist)
    assert isinstance(engine, LegacyEngine)
    warnings_logged = [r for r in caplog.records if r.levelno >= logging.WARNING and "falling back" in r.getMessage()]
    assert len(warnings_logged) == 1
    text = warnings_logged[0].getMessage()
    assert engine_id in text and reason in text and "legacy" in text


def test_fallback_warning_reaches_stderr_without_logging_setup(make_dist, capfd):
    """With logging unconfigured, Python's last-resort handler prints to stderr."""
    root = logging.getLogger()
    saved_handlers = root.handlers[:]
    loader_logger = logging.getLogger("engines.loader")
    saved_loader_handlers = loader_logger.handlers[:]
    root.handlers.clear()
    loader_logger.handlers.clear()
    try:
        load_engine_or_legacy("definitely-not-installed")
    finally:
        root.handlers[:] = saved_handlers
        loader_logger.handlers[:] = saved_loader_handlers
    out, err = capfd.readouterr()
    assert out == ""
    assert "definitely-not-installed" in err and "falling back" in err
