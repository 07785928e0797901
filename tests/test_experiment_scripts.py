"""Every script under experiments/ starts and answers --help: the GPU sessions run them on a lent machine with no
time to find out that one no longer parses its own options (recall_sweep.py once declared an option twice)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the runnable ones: a helper module (experiments/bench/results.py) has no command line
SCRIPTS = sorted(p for d in ("experiments", "experiments/bench", "experiments/paper_grid", "experiments/device")
                 for p in (ROOT / d).glob("*.py")
                 if "sys.argv" in p.read_text() or "__main__" in p.read_text())

# one process for all of them (torch is imported once): each script's --help must exit 0 and print its usage
RUNNER = """
import contextlib, io, runpy, sys
failed = []
for path in sys.argv[1:]:
    sys.argv = [path, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            runpy.run_path(path, run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code
    except Exception as e:
        code = f"{type(e).__name__}: {e}"
    # exit 0, or a usage text naming the script (sys.exit(__doc__))
    if code not in (0, None) and not (isinstance(code, str) and path.rsplit("/", 1)[-1] in code):
        failed.append(f"{path}: {code!r} {out.getvalue()[-300:]}")
    elif not out.getvalue().strip() and not isinstance(code, str):
        failed.append(f"{path}: printed no usage")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_experiment_script_answers_help():
    assert len(SCRIPTS) > 10
    r = subprocess.run([sys.executable, "-c", RUNNER, *map(str, SCRIPTS)], capture_output=True, text=True, timeout=600,
                       cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_the_cpu_step_bench_child_runs_against_this_tree():
    """experiments/bench/cpu_recall_step.py runs its timing code in a child process at each tree it compares; a rename
    in hlnas once broke that child while --help still worked. One warm-up step and one timed step of one layout."""
    import json
    import os

    from experiments.bench.cpu_recall_step import _CHILD, RESULT

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", _CHILD, "tiny", "HHAHHA", "1", "1"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (row,) = [json.loads(line[len(RESULT):]) for line in out.stdout.splitlines() if line.startswith(RESULT)]
    assert row["layout"] == "HHAHHA" and row["ms_per_step"] > 0 and row["loss"] > 0


def test_mqar_curve_trains_the_shift_started_attention_conv(capsys, monkeypatch):
    """experiments/mqar_curve.py's --attention-conv-init reaches the recall model (the CPU analog of issue #20's
    take-off question): a 2-step run prints its summary, and its model starts with the shift."""
    import hlnas.recall.proxy as proxy
    from experiments import mqar_curve

    seen = []
    real = proxy.train_mqar
    monkeypatch.setattr(proxy, "train_mqar", lambda layout, mcfg, cfg, **kw: seen.append(cfg) or real(layout, mcfg, cfg, **kw))
    assert mqar_curve.main(["--L", "16", "--K", "2", "--V", "16", "--layers", "2", "--d", "32", "--steps", "2",
                            "--every", "1", "--bs", "4", "--residual-init", "zero", "--attention-conv", "4",
                            "--attention-conv-init", "shift"]) == 0
    assert "AA: test accuracy" in capsys.readouterr().out
    assert seen[0].model["mixer_hparams"]["attention"] == {"input_conv": 4, "input_conv_init": "shift"}


def test_diagnose_recall_trains_a_case_and_prints_the_whole_traceback_of_one_that_fails(capsys):
    """The device diagnosis (experiments/device/diagnose_recall.py): a case trains its few steps and says ok; a case
    that fails prints its full traceback and FAILED, exit 1 (a sweep brings back only an error's tail)."""
    from experiments.device import diagnose_recall

    case = '{"layout": "AH", "d_model": 32, "kv_pairs": 2, "seq_len": 16, "vocab": 32, "n_heads": 2}'
    assert diagnose_recall.main(["--case", case, "--steps", "2", "--eval-every", "1", "--no-compile", "--label", "t"]) == 0
    assert "t ok: 2 steps" in capsys.readouterr().out
    bad = case.replace('"AH"', '"AQ"')  # Q is no mixer's code
    assert diagnose_recall.main(["--case", bad, "--steps", "2", "--no-compile", "--label", "b"]) == 1
    out = capsys.readouterr()
    assert "b FAILED" in out.out and "Traceback" in out.err
