"""Settings: defaults agree with the engine, precedence flag > env > file > default, every kind
of bad config is a one-line error (exit 78) naming the file, line and key; `synapse config`,
and `synapse completion` (which must never edit a shell file)."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess

import pytest

from conftest import ROOT, assert_clean_failure, run_cli
from synapse_cli.engine import config as cf
from synapse_cli.engine.consolidate import ConsolidateConfig
from synapse_cli.engine.ingest import IngestConfig
from synapse_cli.engine.recall import RecallConfig

TARGETS = {"recall": RecallConfig, "ingest": IngestConfig, "consolidate": ConsolidateConfig}


def test_defaults_are_the_engines():
    for s in cf.SETTINGS:
        if s.target:
            fields = {f.name: f for f in dataclasses.fields(TARGETS[s.target])}
            assert s.key in fields, s.name
            assert fields[s.key].default == s.default, s.name
    assert len({s.key for s in cf.SETTINGS}) == len(cf.SETTINGS)  # env names are unique
    # recall --verify's settings are read by hand into VerifyConfig: its defaults agree too
    from synapse_cli.engine.recall.answer_check import VerifyConfig

    defaults = {s.name: s.default for s in cf.SETTINGS}
    assert VerifyConfig() == VerifyConfig(memories=defaults["verify.verify_memories"],
                                          threshold=defaults["verify.verify_threshold"])


def _write(tmp_path, text: str):
    p = tmp_path / "config.toml"
    p.write_text(text)
    return p


def test_precedence(tmp_path):
    path = _write(tmp_path, "[activation]\nalpha = 0.7\nT = 2\n[recall]\nk = 9\n")
    s = cf.resolve({"recall.k": 4}, path=path, environ={"SYNAPSE_T": "5", "SYNAPSE_K": "7"})
    assert (s["activation.alpha"], s.sources["activation.alpha"]) == (0.7, "file")
    assert (s["activation.T"], s.sources["activation.T"]) == (5, "env")
    assert (s["recall.k"], s.sources["recall.k"]) == (4, "flag")
    assert (s["activation.beta"], s.sources["activation.beta"]) == (
        cf.BY_NAME["activation.beta"].default, "default")
    cfg = RecallConfig(**s.kwargs("recall"))
    assert (cfg.alpha, cfg.T, cfg.k) == (0.7, 5, 4)
    missing = cf.resolve(path=tmp_path / "none.toml", environ={})
    assert set(missing.sources.values()) == {"default"}


def test_env_values_are_typed():
    s = cf.resolve(path=ROOT / "no-such.toml",
                   environ={"SYNAPSE_DECAY": "off", "SYNAPSE_ALPHA": "2", "SYNAPSE_GOAL": "",
                            "SYNAPSE_MODEL": "~/m.gguf"})
    assert s["score.decay"] is False and s["activation.alpha"] == 2.0
    assert s["gating.goal"] is None and s.sources["gating.goal"] == "default"
    assert s["extraction.model"] == os.path.expanduser("~/m.gguf")


@pytest.mark.parametrize("text, needle", [
    ("[activation\nalpha = 1\n", "line 1"),
    ("[activation]\nalfa = 1\n", ":2: unknown setting activation.alfa"),
    ("[recall]\nalpha = 1\n", ":2: unknown setting recall.alpha"),
    ("[activation]\n\nM = 2.5\n", ":3: activation.M = 2.5: expected an integer"),
    ("[activation]\nM = true\n", "expected an integer"),
    ("[score]\ndecay = 1\n", "expected true or false"),
    ("[extraction]\nwindow = 0\n", "expected a value >= 1"),
    ("[recall]\nmode = \"graph\"\n", "expected one of synapse"),
    ("alpha = 1\n", "is not a [section]"),
    # beyond 64 bits was a traceback (orjson, numba); a huge M ran out of memory (helper)
    ("[activation]\nM = 99999999999999999999\n", "expected an integer of magnitude"),
    ("[activation]\nM = 10000000000\n", "expected a value <= 100000"),
    ("[activation]\nS = 1e308\n", "finite number of magnitude"),
    # above 1 every episode became a prune candidate, marked consolidated with no node (helper)
    ("[extraction]\nprune_threshold = 5\n", "expected a value <= 1"),
])
def test_bad_file(tmp_path, text, needle):
    with pytest.raises(cf.ConfigError) as e:
        cf.resolve(path=_write(tmp_path, text), environ={})
    assert needle in str(e.value) and str(tmp_path) in str(e.value)
    assert not e.value.usage


def test_hints_and_flag_errors(tmp_path):
    with pytest.raises(cf.ConfigError) as e:
        cf.resolve(path=_write(tmp_path, "[activation]\nalfa = 1\n"), environ={})
    assert e.value.hint == "did you mean activation.alpha?"
    with pytest.raises(cf.ConfigError) as e:
        cf.resolve(path=tmp_path / "none", environ={"SYNAPSE_K": "five"})
    assert "$SYNAPSE_K" in str(e.value)
    with pytest.raises(cf.ConfigError) as e:
        cf.resolve({"recall.k": 0}, path=tmp_path / "none", environ={})
    assert e.value.usage and str(e.value).startswith("--k 0:")


def test_template_is_valid_toml_of_the_defaults():
    tomllib = pytest.importorskip("tomllib")
    text = cf.template()
    uncommented = "\n".join(line[2:].split("    #")[0] if line.startswith("# ") and "=" in line
                            else line for line in text.splitlines())
    data = tomllib.loads(uncommented)
    for s in cf.SETTINGS:
        value = data[s.section][s.key]
        assert value == ("" if s.default is None else s.default), s.name


def test_config_command(tmp_path):
    (tmp_path / "synapse").mkdir()
    (tmp_path / "synapse" / "config.toml").write_text("[gate]\ntau_gate = 0.2\n")
    r = run_cli(["config"], env={"XDG_CONFIG_HOME": tmp_path, "SYNAPSE_ALPHA": "0.5"})
    assert r.returncode == 0 and r.stderr == ""
    out = json.loads(r.stdout)
    assert out["file"] == str(tmp_path / "synapse" / "config.toml") and out["file_exists"]
    assert out["settings"]["gate"]["tau_gate"] == {"value": 0.2, "source": "file",
                                                   "env": "SYNAPSE_TAU_GATE"}
    assert out["settings"]["activation"]["alpha"]["source"] == "env"
    r = run_cli(["config", "--template"])
    assert r.returncode == 0 and "[activation]" in r.stdout


def test_bad_config_exits_78_without_traceback(tmp_path):
    (tmp_path / "synapse").mkdir()
    (tmp_path / "synapse" / "config.toml").write_text("[activation]\nalfa = 1\n")
    for args in (["config"], ["recall", "anything"], ["ingest", "-"]):
        r = run_cli(args, env={"XDG_CONFIG_HOME": tmp_path}, stdin=subprocess.PIPE)
        lines = assert_clean_failure(r, 78)
        assert "config.toml:2: unknown setting activation.alfa" in lines[0], args
        assert lines[1] == "hint: did you mean activation.alpha?"
    r = run_cli(["recall", "x", "--k", "0"])
    assert_clean_failure(r, 2)


def test_recall_uses_env_file_and_flag(tmp_path):
    store = tmp_path / "store"
    r = run_cli(["ingest", ROOT / "fixtures" / "demo.ndjson"], store)
    assert r.returncode == 0, r.stderr
    q = ["recall", "Where did Caroline go hiking?", "--no-touch"]
    assert not json.loads(run_cli(q, store).stdout)["rejected"]
    assert json.loads(run_cli(q, store, env={"SYNAPSE_TAU_GATE": "5"}).stdout)["rejected"]
    cfg = tmp_path / "cfg"
    (cfg / "synapse").mkdir(parents=True)
    (cfg / "synapse" / "config.toml").write_text("[gate]\ntau_gate = 5.0\n[recall]\nk = 2\n")
    env = {"XDG_CONFIG_HOME": cfg}
    assert json.loads(run_cli(q, store, env=env).stdout)["rejected"]
    out = json.loads(run_cli(q + ["--tau-gate", "0"], store, env=env).stdout)
    assert not out["rejected"] and len(out["results"]) == 2


def test_completion_prints_a_script_and_completes(tmp_path):
    r = run_cli(["--help"])
    assert "--install-completion" not in r.stdout and "completion" in r.stdout
    home = tmp_path / "home"
    home.mkdir()
    r = run_cli(["completion", "bash"], env={"HOME": home})
    assert r.returncode == 0 and "complete -o default -F _synapse_completion synapse" in r.stdout
    assert list(home.iterdir()) == []  # no rc file written
    for shell in ("zsh", "fish"):
        assert run_cli(["completion", shell]).stdout.strip()
    assert_clean_failure(run_cli(["completion", "tcsh"]), 2)
    r = run_cli([], env={"_SYNAPSE_COMPLETE": "complete_bash", "COMP_WORDS": "synapse rec",
                         "COMP_CWORD": "1"})
    assert r.stdout.split() == ["recall"]
    r = run_cli([], env={"_SYNAPSE_COMPLETE": "complete_bash",
                         "COMP_WORDS": "synapse config --te", "COMP_CWORD": "2"})
    assert r.stdout.split() == ["--template"]


def test_python_310_without_tomli_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(cf, "tomllib", None)
    assert cf.resolve(path=tmp_path / "none.toml", environ={})["recall.k"] == 30  # no file: fine
    with pytest.raises(cf.ConfigError) as e:
        cf.resolve(path=_write(tmp_path, "[recall]\nk = 5\n"), environ={})
    assert "Python 3.11+ or the tomli package" in str(e.value) and "tomli" in e.value.hint


@pytest.mark.parametrize("args", [["config"], ["config", "--template"], ["completion", "bash"]])
def test_closed_stdout_is_not_an_error(args):
    """`synapse ... | head` must exit 0: click would turn the EPIPE into exit 1."""
    from conftest import SYNAPSE, cli_env

    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write
    try:
        r = subprocess.run([str(SYNAPSE), *args], stdout=write, stderr=subprocess.PIPE,
                           env=cli_env(), text=True, timeout=60)
    finally:
        os.close(write)
    assert (r.returncode, r.stderr) == (0, ""), args


def test_a_misspelled_variable_is_named_and_other_programs_variables_are_not(tmp_path):
    assert cf.env_typos({"SYNAPSE_ALPAH": "0.9", "SYNAPSE_MCP_WRITE_WAIT": "1",
                         "SYNAPSE_SERVER_NAME": "matrix.example", "SYNAPSE_ALPHA": "1"}) == [
        ("SYNAPSE_ALPAH", "SYNAPSE_ALPHA"), ("SYNAPSE_MCP_WRITE_WAIT", "SYNAPSE_WRITE_WAIT")]
    r = run_cli(["config", "--json"], tmp_path / "s", env={"SYNAPSE_LAMBDA_SPEEKER": "0"})
    assert r.returncode == 0
    assert "$SYNAPSE_LAMBDA_SPEEKER is not a synapse variable" in r.stderr
    assert "$SYNAPSE_LAMBDA_SPEAKER" in r.stderr
    quiet = run_cli(["-q", "config", "--json"], tmp_path / "s",
                    env={"SYNAPSE_LAMBDA_SPEEKER": "0"})
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_config_prints_one_thing(tmp_path):
    for args in (["--template", "--path"], ["--template", "--json"], ["--path", "--json"]):
        assert "give one" in assert_clean_failure(run_cli(["config", *args], tmp_path), 2)[0]


def test_file_paths_links_marks_and_empty_flags(tmp_path, monkeypatch):
    """A relative model path was taken from the working directory (cron's is not the
    shell's); a dangling link was "no file" and the defaults applied without a word; a UTF-8
    byte-order mark was a TOML error; `--model ""` meant the packaged model (helper)."""
    cfg = _write(tmp_path, "\ufeff[extraction]\nmodel = \"models/m.gguf\"\n")
    monkeypatch.chdir("/")
    s = cf.resolve(path=cfg, environ={})
    assert s["extraction.model"] == str(cfg.parent / "models" / "m.gguf")
    link = tmp_path / "link.toml"
    link.symlink_to(tmp_path / "missing.toml")
    with pytest.raises(cf.ConfigError, match="missing file"):
        cf.resolve(path=link, environ={})
    with pytest.raises(cf.ConfigError, match="--model is empty") as e:
        cf.resolve({"extraction.model": ""}, path=tmp_path / "none.toml", environ={})
    assert e.value.usage
    with pytest.raises(cf.ConfigError, match="--embedder is empty"):  # not the current directory
        cf.resolve({"embedding.embed_model_dir": ""}, path=tmp_path / "none.toml", environ={})
    # an empty --goal is still how one run switches a configured goal off
    goal = _write(tmp_path, "[gating]\ngoal = \"payments\"\n")
    assert cf.resolve({"gating.goal": ""}, path=goal, environ={})["gating.goal"] is None
