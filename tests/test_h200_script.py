"""experiments/paper_grid/h200.sh's choice of study database (issue #20's GPU runs resume across device calls): the
machine's own copy continues the last call unless the carried one is newer, judged by the generation stamped beside
each copy. Run on the CPU with a python3 that has no optuna, so the script stops right after choosing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "paper_grid" / "h200.sh"


def _call(tmp_path: Path, carried: tuple[str, int | None] | None, machine: tuple[str, int | None] | None) -> str:
    """Run h200.sh's start with a carried .gpu_state (content, generation) and a machine state; return the database
    the machine holds afterwards."""
    repo, state, out, bin_ = (tmp_path / n for n in ("repo", "state", "out", "bin"))
    for d in (repo, state, out, bin_):
        d.mkdir(exist_ok=True)
    (bin_ / "python3").write_text("#!/bin/sh\nexit 1\n")  # "optuna not installed": the script stops after the choice
    (bin_ / "python3").chmod(0o755)
    for folder, spec in ((repo / ".gpu_state", carried), (state, machine)):
        if spec is None:
            continue
        folder.mkdir(exist_ok=True)
        (folder / "h200.db").write_text(spec[0])
        if spec[1] is not None:
            (folder / "h200.gen").write_text(f"{spec[1]}\n")
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "OUT": str(out), "HLNAS_STATE": str(state),
           "HOME": str(tmp_path)}
    r = subprocess.run(["bash", str(SCRIPT), "check"], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "optuna (and fla) not installed" in r.stdout, r.stdout + r.stderr
    return (state / "h200.db").read_text() if (state / "h200.db").exists() else ""


@pytest.mark.parametrize("carried, machine, want", [
    (("carried", 3), None, "carried"),                  # a fresh machine restores what was carried
    (("carried", None), None, "carried"),               # a copy from before generations were stamped
    (("carried", 3), ("machine", 3), "machine"),        # a warm machine continues its own (paused runs live there)
    (("carried", 2), ("machine", 3), "machine"),        # a stale carried copy never replaces a newer one
    (("carried", 4), ("machine", 3), "carried"),        # the 2026-12-03 case: the machine's copy is older
    (("carried", 1), ("machine", None), "carried"),     # a machine copy without a stamp is generation 0
    (None, ("machine", 3), "machine"),
])
def test_the_newer_study_database_wins(tmp_path, carried, machine, want):
    assert _call(tmp_path, carried, machine) == want


@pytest.mark.parametrize("ask, elapsed, want", [(200, 0, 200), (200, 500, 60), (200, 570, 1), (200, 700, 1)])
def test_a_bench_steps_time_limit_stays_inside_the_call_and_never_becomes_no_limit(ask, elapsed, want):
    """cap T: T seconds, but never past CALL_LIMIT less 30 s for the closing archive, and at least 1, since
    `timeout 0` runs without a limit and a call the device kills brings nothing back."""
    (line,) = [ln for ln in SCRIPT.read_text().splitlines() if ln.startswith("cap() {")]
    script = f"{line}\nCALL_LIMIT=590; t0=$(( $(date +%s) - {elapsed} )); cap {ask}"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=10)
    assert int(out.stdout) == want


def _machine(tmp_path: Path, python3: str, **bins: str) -> tuple[Path, Path, Path]:
    """A fake device machine for h200.sh's steps: repo, state and OUT folders under ``tmp_path``, and first on PATH a
    ``python3`` (its shell body, after the shebang), an ``nvidia-smi`` naming one GPU and any further ``bins`` (name ->
    shell body). Returns (repo, state, out)."""
    repo, state, out, bin_ = (tmp_path / n for n in ("repo", "state", "out", "bin"))
    for d in (repo, state, out, bin_):
        d.mkdir()
    for name, body in {"python3": python3, "nvidia-smi": "echo 'GPU 0: fake'\n", **bins}.items():
        (bin_ / name).write_text("#!/bin/sh\n" + body)
        (bin_ / name).chmod(0o755)
    return repo, state, out


def _run_steps(tmp_path: Path, steps: list[str], home: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """h200.sh STEPS on the fake machine of :func:`_machine` (CALL_LIMIT 590, no cache back unless ``env`` says), which
    must exit 0."""
    repo, state, out, bin_ = (tmp_path / n for n in ("repo", "state", "out", "bin"))
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "OUT": str(out), "HLNAS_STATE": str(state),
           "HOME": str(home or tmp_path), "CALL_LIMIT": "590", "CACHE_BACK": "0", **env}
    r = subprocess.run(["bash", str(SCRIPT), *steps], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_inductor_cache_is_restored_on_a_fresh_machine_and_comes_back_beside_tritons(tmp_path):
    """A fresh machine unpacks the carried inductor cache (.triton_cache/inductor_cache.tgz.*) where TORCHINDUCTOR_CACHE_DIR
    points, and CACHE_BACK=1 brings it back in one part beside Triton's, so compiled recall blocks need not be compiled
    again on the next fresh machine."""
    import tarfile

    repo, _, out = _machine(tmp_path, 'case "$*" in *device_count*) echo 1;; esac\nexit 0\n')
    home = tmp_path / "home"
    src = tmp_path / "src" / "inductor" / "fxgraph"
    src.mkdir(parents=True)
    (src / "entry").write_text("compiled")
    (repo / ".triton_cache").mkdir()
    with tarfile.open(repo / ".triton_cache" / "inductor_cache.tgz.aa", "w:gz") as t:
        t.add(tmp_path / "src" / "inductor", arcname="inductor")
    r = _run_steps(tmp_path, ["calibrate_by:0"], home=home, CACHE_BACK="1")
    assert "restored inductor cache" in r.stdout
    assert (home / ".triton" / "inductor" / "fxgraph" / "entry").read_text() == "compiled"
    (part,) = out.glob("inductor_cache.tgz.*")
    with tarfile.open(part, "r:gz") as t:
        assert "inductor/fxgraph/entry" in t.getnames()
    assert list(out.glob("triton_cache.tgz.*"))


def test_calibrate_by_a_time_already_passed_says_so_and_runs_the_next_step(tmp_path):
    """calibrate_by:T with T behind the clock (2026-12-04: calibrate_by:5 after a 5 s start) once reached hlnas calibrate
    as --timeout 0, refused with rc 2; it now says there is no time left and the later steps still run."""
    calls = tmp_path / "calls"
    _machine(tmp_path, f'echo "$@" >>{calls}\ncase "$*" in *device_count*) echo 1;; esac\nexit 0\n')
    r = _run_steps(tmp_path, ["calibrate_by:0", "grid_by:0"])
    assert "no time left for the calibration: T=0 s passed" in r.stdout, r.stdout
    assert "no time left for the grid" in r.stdout
    assert "calibrate" not in calls.read_text()


@pytest.mark.parametrize("step, study", [("grid_by:200", "paper_grid_h200_lr"), ("placement_by:200", "placement_h200_lr")])
def test_a_grid_or_placement_step_that_ran_its_search_does_not_say_there_was_no_time(tmp_path, step, study):
    """search() ends with a grep for failures that finds none (rc 1); chained as `&& search || say`, every grid call
    of 2026-12-05 that trained trials went on to print "no time left for the grid"."""
    calls = tmp_path / "calls"
    _machine(tmp_path, f'echo "$@" >>{calls}\ncase "$*" in *device_count*) echo 1;; esac\nexit 0\n')
    r = _run_steps(tmp_path, [step])
    assert f"--study {study}" in calls.read_text()
    assert "no time left" not in r.stdout, r.stdout


def test_steps_joined_by_plus_run_side_by_side_each_at_its_own_worker_count(tmp_path):
    """grid_by:T/1+grid_s1_by:T/2: seed 0's last trial and seed 1's search at once (one process alone leaves the GPU
    idle while it compiles), each search at the workers after its slash; a step after them waits for both."""
    calls = tmp_path / "calls"
    _machine(tmp_path, 'case "$*" in *device_count*) echo 1; exit 0;; "- paper_grid_h200_lr "*) echo valid; exit 0;; esac\n'
                       f'case "$*" in *"hlnas search"*) echo "start $(date +%s.%N) $*" >>{calls}; sleep 1;'
                       f' echo "end $(date +%s.%N)" >>{calls};; esac\nexit 0\n')
    r = _run_steps(tmp_path, ["grid_by:200/1+grid_s1_by:200/2", "placement_by:200"])
    lines = [ln.split(" ", 2) for ln in calls.read_text().splitlines()]
    starts = [ln for ln in lines if ln[0] == "start"]
    assert len(starts) == 3, r.stdout
    workers = {ln[2].split("--study ")[1].split()[0]: ln[2].split("--workers ")[1].split()[0] for ln in starts}
    assert workers == {"paper_grid_h200_lr": "1", "paper_grid_h200_lr_s1": "2", "placement_h200_lr": str(1 * 4)}
    first_end = min(float(ln[1]) for ln in lines if ln[0] == "end")
    t = {ln[2].split("--study ")[1].split()[0]: float(ln[1]) for ln in starts}
    assert max(t["paper_grid_h200_lr"], t["paper_grid_h200_lr_s1"]) < first_end  # both started before either ended
    assert t["placement_h200_lr"] >= first_end  # the next step waited


def test_placement_s1_by_trains_the_placements_second_seed_in_its_own_study_beside_seed_0(tmp_path):
    """placement_by:T/2+placement_s1_by:T/2: both seeds of the placement extension in one call; seed 1 is study
    ${PLACE_STUDY}_s1 with --set train.seed=1, and both borrow the grid's calibration."""
    calls = tmp_path / "calls"
    _machine(tmp_path, f'case "$*" in *device_count*) echo 1; exit 0;; *"hlnas search"*) echo "$*" >>{calls};; esac\n'
                       'exit 0\n')
    _run_steps(tmp_path, ["placement_by:200/2+placement_s1_by:200/2"], PLACE_STUDY="pl", PLACE_CALIBRATED_BY="grid")
    got = {ln.split("--study ")[1].split()[0]: ln for ln in calls.read_text().splitlines()}
    assert set(got) == {"pl", "pl_s1"}
    assert "--set train.seed=1" in got["pl_s1"] and "--set" not in got["pl"]
    assert all("--calibrated-by grid" in ln and "--workers 2" in ln for ln in got.values())
    assert not any("--results-from" in ln for ln in got.values())  # only where asked
    # PLACE_RESULTS_FROM / PLACE_S1_RESULTS_FROM: each seed adopts the grid's results of its own seed
    calls.unlink()
    _run_steps(tmp_path, ["placement_by:200/2+placement_s1_by:200/2"], PLACE_STUDY="pl", PLACE_CALIBRATED_BY="grid",
               PLACE_RESULTS_FROM="grid", PLACE_S1_RESULTS_FROM="grid_s1")
    got = {ln.split("--study ")[1].split()[0]: ln for ln in calls.read_text().splitlines()}
    assert "--results-from grid " in got["pl"] + " " and "--results-from grid_s1" in got["pl_s1"]
    assert "--results-from grid " not in got["pl_s1"] + " "


def test_a_search_step_prints_how_many_trials_its_log_says_done_and_where_the_study_stands(tmp_path):
    """The call's output tail is what the session reads between back-to-back calls: each search says how many trials
    its log has done and the study's state line from hlnas status."""
    _machine(tmp_path, 'case "$*" in *device_count*) echo 1; exit 0;;\n'
                       '  *"hlnas search"*) echo "  trial 3 done AAAA"; exit 0;;\n'
                       '  *"hlnas status"*) echo "study pl: 9 complete, 15 waiting (target 24 trials)"; exit 0;; esac\n'
                       'exit 0\n')
    r = _run_steps(tmp_path, ["placement_by:200"], PLACE_STUDY="pl")
    assert "1 trials done in this call's log" in r.stdout, r.stdout
    assert "study pl: 9 complete, 15 waiting (target 24 trials)" in r.stdout



def test_wheels_in_parts_install_once_every_part_reached_the_machine(tmp_path):
    """tilelang's wheels (82.5 MB) pass one call's carry: fetch_wheels.sh packs them as a tar in parts that calls carry
    back to back. A call with some parts stages them on the machine and installs nothing; the call that brings the
    last part installs every wheel of the tar; a later call installs nothing again."""
    import io
    import tarfile

    repo, state, out = _machine(tmp_path, 'if [ "$1" = -m ]; then echo "$@" >>"$HOME/pip.log"; exit 0; fi\nexit 1\n')
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ("a/z3_solver-4.15-py3-none-any.whl", "b/tilelang-0.1.15-cp312-none-any.whl"):
            info = tarfile.TarInfo(name)
            info.size = 4096
            tar.addfile(info, io.BytesIO(b"w" * 4096))
    data = buf.getvalue()
    half = len(data) // 2
    parts = repo / ".whl_parts"
    env = {"HLNAS_SITE": str(tmp_path / "site"), "HLNAS_PARTS": str(tmp_path / "parts")}
    (tmp_path / "site").mkdir()

    def call(*chunks: tuple[str, bytes]) -> str:
        import shutil

        shutil.rmtree(parts, ignore_errors=True)
        parts.mkdir()
        (parts / "tilelang.parts").write_text("2\n")
        for suffix, chunk in chunks:
            (parts / f"tilelang.tar.{suffix}").write_bytes(chunk)
        r = subprocess.run(["bash", str(SCRIPT), "check"], cwd=repo, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "OUT": str(out),
                                "HLNAS_STATE": str(state), "HOME": str(tmp_path), **env})
        assert r.returncode == 2, r.stdout + r.stderr  # the fake python3 has no optuna: the script stops after setup
        return r.stdout

    pip_log = tmp_path / "pip.log"
    assert "staged tilelang: 1 of 2 parts" in call(("aa", data[:half]))
    assert not pip_log.exists()
    said = call(("ab", data[half:]))
    assert "installed 2 wheels of tilelang from 2 parts" in said
    (line,) = pip_log.read_text().splitlines()
    assert f"--target {tmp_path / 'site'}" in line and "z3_solver-4.15" in line and "tilelang-0.1.15" in line
    assert (tmp_path / "site" / ".hlnas_tilelang").exists()
    said = call()
    assert "tilelang" not in said and len(pip_log.read_text().splitlines()) == 1


def test_warm_runs_hlnas_warm_per_mixer_of_the_space_and_the_control(tmp_path):
    """The warm step compiles at the grid space's own shapes: one `hlnas warm --space $SPACE --mixers M` per mixer of
    the space and the all-attention control (issue #22 point 4), not a training script at a shape of its own."""
    calls = tmp_path / "calls"
    _machine(tmp_path, f'echo "$@" >>{calls}\ncase "$*" in *device_count*) echo 1;; esac\nexit 0\n')
    _run_steps(tmp_path, ["warm:5"])
    warms = [line.split() for line in calls.read_text().splitlines() if line.startswith("-m hlnas warm")]
    assert sorted(w[-1] for w in warms) == sorted(
        ["transformer", "hgrn", "retnet", "gla", "hgrn2", "deltanet", "gated_deltanet"])
    assert all(w[w.index("--space") + 1] == "search_spaces/paper_grid_h200_lr.yaml" for w in warms)
    from hlnas.space import load_space  # every mixer warmed is one the space trains
    assert {w[-1] for w in warms} == {*load_space(str(SCRIPT.parents[2] / "search_spaces" / "paper_grid_h200_lr.yaml")).mixers, "transformer"}


def test_gpu_tests_cut_by_their_time_limit_still_say_which_test_failed(tmp_path):
    """A gpu_tests step that runs out of time stops pytest with SIGINT, which still prints the failures so far, and
    the step prints them (on 2026-12-06 a timed-out run showed only its progress dots, and which test failed was
    lost): the fake pytest fails one test, then waits until interrupted."""
    _machine(tmp_path, 'case "$*" in *device_count*) echo 1; exit 0;; *pytest*)\n'
                       '  echo ".F"; sleep 30 & s=$!\n'
                       '  trap \'kill $s; echo "FAILED tests/test_x.py::test_b - AssertionError: boom"; exit 2\' INT\n'
                       '  wait $s; exit 0;;\nesac\nexit 0\n')
    r = _run_steps(tmp_path, ["gpu_tests:18"])
    assert "gpu_tests rc=124" in r.stdout
    assert "FAILED tests/test_x.py::test_b - AssertionError: boom" in r.stdout


def test_gpu_tests_take_a_k_expression_with_spaces_as_one_argument(tmp_path):
    """GPU_TESTS is word-split (paths and node ids); GPU_TESTS_K reaches pytest whole as ``-k EXPR`` (a session once had
    to spell three parametrized node ids out because its expression split into three words)."""
    calls = tmp_path / "calls"
    _machine(tmp_path, 'case "$*" in *device_count*) echo 1; exit 0;; *pytest*)\n'
                       f'  for a in "$@"; do echo "[$a]"; done >{calls}; echo "1 passed"; exit 0;;\nesac\nexit 0\n')
    _run_steps(tmp_path, ["gpu_tests:30"], GPU_TESTS="tests/test_head_loss.py tests/test_train_gpu.py",
               GPU_TESTS_K="captured or compiled")
    args = calls.read_text().splitlines()
    assert "[tests/test_head_loss.py]" in args and "[tests/test_train_gpu.py]" in args
    assert args[args.index("[-k]") + 1] == "[captured or compiled]"
    _run_steps(tmp_path, ["gpu_tests:30"], GPU_TESTS="tests/test_head_loss.py")
    assert "[-k]" not in calls.read_text().splitlines()  # unset: no -k at all


@pytest.mark.parametrize("recall", ["1", "0"])
def test_bench_autotune_at_the_recall_models_shape_when_asked(tmp_path, recall):
    """AUTOTUNE_RECALL=1: quick vs full autotune on the recall model of the calibrating space, graph steps (as
    bench_recall), where fla's kernels run on small heads; otherwise at paper-340m, as before."""
    calls = tmp_path / "calls"
    _machine(tmp_path, 'case "$*" in *device_count*) echo 1; exit 0;; *paper_scale*)\n'
                       f'  for a in "$@"; do echo "[$a]"; done >{calls};;\nesac\nexit 0\n')
    _run_steps(tmp_path, ["bench_autotune:100"], AUTOTUNE_RECALL=recall, SPACE="search_spaces/paper_grid_h200_lr.yaml",
               BENCH_ONLY="gla:3:1@compile")
    args = calls.read_text().splitlines()
    assert "[--autotune-compare]" in args and args[args.index("[--only]") + 1] == "[gla:3:1@compile]"
    if recall == "1":
        assert args[args.index("[--recall-space]") + 1] == "[search_spaces/paper_grid_h200_lr.yaml]"
        assert args[args.index("[--mode]") + 1] == "[graph]"
    else:
        assert "[--recall-space]" not in args and "[--mode]" not in args


def test_every_hlnas_command_a_call_runs_parses_with_hlnas_own_options(tmp_path):
    """The steps' hlnas search, calibrate and warm commands are parsed by hlnas's own parser: an option the CLI lost
    (--runs-per-worker, --replicas went with their features) must fail here, not on the lent machine."""
    from hlnas.cli.main import build_parser

    calls = tmp_path / "calls"
    _machine(tmp_path, 'case "$*" in *device_count*) echo 1; exit 0;; *"- paper_grid_h200_lr "*) echo valid; exit 0;; esac\n'
                       f'case "$1 $2" in "-m hlnas") printf "%s\\n" "$*" >>{calls};; esac\nexit 0\n')
    _run_steps(tmp_path, ["warm:5", "calibrate_by:200", "grid_by:200", "grid_s1_by:200", "placement_by:200",
                          "placement_s1_by:200"], DRAIN="30", RETRY_FAILED="1")
    commands = [ln.split()[2:] for ln in calls.read_text().splitlines()]
    assert {c[0] for c in commands} >= {"warm", "calibrate", "search", "status"}
    parser = build_parser()
    for argv in commands:
        parser.parse_args(argv)  # exits 2, naming the option, on one it does not know
