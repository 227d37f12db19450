"""hookscope-cli from the outside: exit codes, and export folders read by Python.

Run by ctest (which sets HOOKSCOPE_CLI, HOOKSCOPE_FIXTURES, HOOKSCOPE_MODELS and
HOOKSCOPE_TEST_OPS) with HOOKSCOPE_PYTHON, whose PyTorch the engine links.
"""
import csv
import hashlib
import importlib.util
import json
import math
import os
import time
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import unittest
import zipfile

import torch

from zip_damage import flip_a_byte_in
from deadlines import DEADLINE, catches, child_pids, cpu_seconds, wait_until

CLI = os.environ.get("HOOKSCOPE_CLI", "build/cli/hookscope-cli")
FIXTURES = os.environ.get("HOOKSCOPE_FIXTURES", "build/fixtures")
MODELS = os.environ.get("HOOKSCOPE_MODELS", "resources/models")
CNN = os.path.join(MODELS, "small_cnn.pt")
HEADER = ("step,rank,module,call,kind,index,shape,dtype,numel,min,max,mean,std,l2norm,zero_frac,"
          "nan_count,inf_count,amax,f16_overflow,f16_underflow,e4m3_underflow,e5m2_underflow")


def run(*args):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=DEADLINE)


def read_stats(folder):
    with open(os.path.join(folder, "stats.csv"), newline="") as f:
        return list(csv.DictReader(f))


def read_scalars(folder):
    with open(os.path.join(folder, "scalars.csv"), newline="") as f:
        return list(csv.DictReader(f))


def close(a, b, rel=1e-5, scale=0.0):
    return abs(a - b) <= rel * max(abs(a), abs(b), scale)


class CliTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hookscope-cli-test-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def out(self, name="export"):
        return os.path.join(self.tmp, name)

    def assertExit(self, result, code, says=None):
        self.assertEqual(result.returncode, code, f"stdout: {result.stdout}\nstderr: {result.stderr}")
        if says:
            self.assertIn(says, result.stderr)
        if code not in (0, 2):
            lines = [line for line in result.stderr.splitlines() if line.startswith("hookscope-cli:")]
            self.assertEqual(len(lines), 1, "every error is one clear line: " + result.stderr)


class ExitCodes(CliTestCase):
    def test_help_explains_every_option(self):
        result = run("capture", "--help")
        self.assertExit(result, 0)
        for option in ["--hook", "--kinds", "--input", "--data", "--batch-size", "--steps", "--loss",
                       "--optimizer", "--lr", "--eval", "--no-grad", "--seed", "--bins",
                       "--save-tensors", "--force"]:
            self.assertIn(option, result.stdout)
        self.assertIn("Exit codes", run("--help").stdout)

    def test_usage_errors_exit_2(self):
        self.assertExit(run("capture", CNN, "--out", self.out(), "--bogus"), 2)
        self.assertExit(run("capture", CNN, "--out", self.out(), "--kinds", "activation,weird"), 2, "weird")
        self.assertExit(run("capture", CNN, "--out", self.out(), "--input", "8xx1"), 2, "bad input spec")
        # Bounds that do not fit the dtype, and sizes beyond memory: usage errors, never an abort.
        for spec, says in [("8x1x28x28:float32:-1e308:1e308", "do not fit float32"),
                           ("8x1x28x28:float64:-1e308:1e308", "overflows float64"),
                           ("8x1x28x28:bfloat16:0:1e39", "do not fit bfloat16"),
                           ("8x1x28x28:float16:0:70000", "do not fit float16"),
                           ("8x1x28x28:int64:0:1e30", "do not fit int64"),
                           ("8x1x28x28:int64:5.1:5.9", "whole numbers"),
                           ("8x1x28x28:uint8:-1:10", "do not fit uint8"),
                           ("8x1x28x28:float32:-1e308:1e308", "bounds [-1e+308, 1e+308)"),
                           ("8x-1x28", "dimension '-1' is negative"),
                           ("2147483648x1x28x28", "out of range"),
                           ("99999x99999x28", "more than the")]:
            for command in (["inspect", CNN, "--input", spec], ["capture", CNN, "--out", self.out(), "--input", spec]):
                with self.subTest(spec=spec, command=command[0]):
                    self.assertExit(run(*command), 2, says)
        self.assertExit(run("capture", CNN, "--out", "", "--steps", "1"), 2, "names no folder")
        self.assertExit(run("capture", CNN, "--out", self.out(), "--hook", "nothing.*"), 2, "matches no module")
        self.assertExit(run("capture", CNN, "--out", self.out(), "--loss", "hinge"), 2, "hinge")
        self.assertExit(run(), 2)

    def test_unloadable_models_exit_3(self):
        for name, says in [("missing.pt", "No file at"), ("empty.pt", "is empty"), ("truncated.pt", "truncated")]:
            with self.subTest(name=name):
                path = os.path.join(FIXTURES, "bad", name)
                self.assertExit(run("capture", path, "--out", self.out(), "--input", "1x3"), 3, says)
                self.assertExit(run("inspect", path), 3, says)

    def test_a_pickled_model_is_code_it_asks_trust_for_then_says_why_its_classes_are_missing(self):
        path = os.path.join(FIXTURES, "bad", "eager_zip.pt")  # torch.save(SplitHead()) from a script
        self.assertExit(run("inspect", path), 9, "__main__.SplitHead")
        self.assertExit(run("capture", path, "--out", self.out(), "--input", "1x32"), 9, "__main__.SplitHead")
        self.assertExit(run("capture", path, "--out", self.out(), "--input", "1x32", "--trust"), 3, "torch.export.save")

    def test_a_refusal_leaves_no_engine_log_behind(self):
        """Exit 9 says every finding: the engine's log of them is not left in the temp folder."""
        model = os.path.join(FIXTURES, "bad", "setstate_from_file.pt")
        temp = self.out("temp")
        os.makedirs(temp)
        env = dict(os.environ, TMPDIR=temp)
        for command in (["inspect", model], ["capture", model, "--out", self.out(), "--input", "3x4"]):
            with self.subTest(command=command[0]):
                result = subprocess.run([CLI, *command], capture_output=True, text=True, timeout=DEADLINE, env=env)
                self.assertExit(result, 9, "__setstate__")
                self.assertEqual(os.listdir(temp), [])

    def test_a_model_whose_code_writes_a_file_is_refused_unless_trusted(self):
        model = os.path.join(FIXTURES, "bad", "setstate_from_file.pt")
        victim = os.path.join(FIXTURES, "bad", "victim.bin")
        with open(victim, "wb") as f:
            f.write(b"A" * 16)
        for command in (["inspect", model], ["capture", model, "--out", self.out(), "--input", "3x4"]):
            with self.subTest(command=command[0]):
                result = run(*command)
                self.assertExit(result, 9, "__setstate__")
                self.assertIn("torch.from_file", result.stderr)
                self.assertIn("--trust", result.stderr)
                with open(victim, "rb") as f:
                    self.assertEqual(f.read(), b"A" * 16, "the victim file was written")
        # --trust lets the model's code run, but confined: it cannot open the file for writing,
        # neither in inspect nor in capture (which may write only its export).
        for command in (["inspect", model, "--trust"],
                        ["capture", model, "--trust", "--out", self.out(), "--input", "3x4"]):
            with self.subTest(command=command[0] + " --trust"):
                result = run(*command)
                self.assertExit(result, 3, "Permission denied")
                self.assertIn("nothing was written", result.stderr)
                with open(victim, "rb") as f:
                    self.assertEqual(f.read(), b"A" * 16, "the victim file was written")
        # --no-confine is what a user who trusts the file asks for: then it does write.
        self.assertExit(run("inspect", model, "--trust", "--no-confine"), 0)
        with open(victim, "rb") as f:
            self.assertEqual(f.read(), b"X" * 8 + b"A" * 8)

    def test_a_crash_in_the_engine_process_leaves_the_export_of_the_steps_before(self):
        # capture runs the model in an engine process (hookscope-cli serve): what a crash inside
        # LibTorch does to it is what SIGSEGV does here.
        out = self.out()
        process = subprocess.Popen([CLI, "capture", os.path.join(MODELS, "small_cnn.pt"), "--out", out, "--steps", "100000"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: child_pids(process.pid), "capture to start its engine process")
        engine = child_pids(process.pid)[0]
        # Some steps: capture says each on its standard error (a pipe: a line a step).
        said = []
        while len([line for line in said if line.startswith("step ")]) < 3:
            line = process.stderr.readline()
            self.assertTrue(line, "capture ended before three steps: %s" % "".join(said))
            said.append(line)
        os.kill(engine, signal.SIGSEGV)
        rest, stderr = process.communicate(timeout=DEADLINE)
        stderr = "".join(said) + stderr
        self.assertEqual(process.returncode, 4, stderr)
        # SIGSEGV; under AddressSanitizer (scripts/asan.sh) its handler reports the SEGV and aborts.
        self.assertRegex(stderr, r"killed by signal (11 \(SIGSEGV|6 \(SIGABRT)")
        with open(os.path.join(out, "manifest.json")) as f:
            manifest = json.load(f)
        self.assertGreater(manifest["steps"], 0)
        with open(os.path.join(out, "stats.csv")) as f:
            self.assertGreater(len(f.readlines()), 1)

    def test_an_open_that_never_ends_is_cancelled_by_ctrl_c_or_the_open_timeout(self):
        model = os.path.join(FIXTURES, "bad", "setstate_forever.pt")
        # No open limit (its default, 120 s, could end the open first on a busy machine).
        process = subprocess.Popen([CLI, "capture", model, "--trust", "--input", "2x4", "--out", self.out(),
                                    "--open-timeout", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Ctrl+C once capture takes it and its engine is in the loading's loop (seconds of its CPU
        # time: opening the file itself takes a fraction of one).
        wait_until(lambda: catches(process.pid, signal.SIGINT) and child_pids(process.pid)
                   and cpu_seconds(child_pids(process.pid)[0]) >= 3, "the engine to loop in the model's loading")
        self.assertIsNone(process.poll(), "the model's loading loops: capture waits")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=DEADLINE)
        self.assertEqual(process.returncode, 3, stderr)
        self.assertIn("cancelled", stderr)
        # The open's own limit (the step's is no bound on it: a step limit of 1 s leaves the open alone).
        started = time.monotonic()
        result = run("capture", model, "--trust", "--input", "2x4", "--out", self.out("second"), "--open-timeout", "2",
                     "--step-timeout", "1")
        self.assertExit(result, 3, "did not open within 2 s (--open-timeout)")
        self.assertGreaterEqual(time.monotonic() - started, 2)

    def test_a_crash_in_this_process_is_reported_with_what_to_do(self):
        # inspect and capture --save-tensors run the model in their own process: a crash inside
        # LibTorch (here SIGSEGV sent while it loads or runs a model that loops) is one clear line
        # and an exit code, not a bare "Segmentation fault". No time limit: inspect's default (120 s)
        # could end the loop first on a busy machine (CI's sanitizer build once reached 3 s of CPU
        # only then, and both lines were written).
        cases = [(["inspect", os.path.join(FIXTURES, "bad", "setstate_forever.pt"), "--trust",
                   "--step-timeout", "0"], 3,
                  "LibTorch read"),
                 (["capture", os.path.join(FIXTURES, "bad", "forward_forever.pt"), "--input", "2x4",
                   "--save-tensors", "fc", "--out", self.out()], 4, "forward_forever.pt ran")]
        for args, code, says in cases:
            with self.subTest(command=args[0]):
                process = subprocess.Popen([CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                # SIGSEGV once the command's crash report is installed and it has spent seconds of CPU
                # since (in the model's loop: what comes between takes milliseconds). Its handler is
                # seen by SIGILL's: AddressSanitizer's runtime catches SIGSEGV from the start, and under
                # it the report is installed only after 3-4 s of CPU (a SIGSEGV before that went to
                # the sanitizer's handler, which once hung CI for 300 s).
                wait_until(lambda: catches(process.pid, signal.SIGILL), "%s to install its crash report" % args[0])
                installed = cpu_seconds(process.pid)
                wait_until(lambda: cpu_seconds(process.pid) >= installed + 2, "%s to loop in the model" % args[0])
                self.assertIsNone(process.poll(), "the model loops: the command waits")
                process.send_signal(signal.SIGSEGV)
                stdout, stderr = process.communicate(timeout=DEADLINE)
                self.assertExit(subprocess.CompletedProcess(args, process.returncode, stdout, stderr), code,
                                "the process crashed (SIGSEGV) while")
                self.assertIn(says, stderr)
                self.assertIn("Nothing was written", stderr)
        self.assertFalse(os.path.exists(self.out()))

    def test_inspect_gives_up_on_an_open_or_a_forward_that_never_ends(self):
        # inspect runs the model in its own process; without a bound it hung until Ctrl+C.
        cases = [(["inspect", os.path.join(FIXTURES, "bad", "setstate_forever.pt"), "--trust"], 3,
                  "opening " + os.path.join(FIXTURES, "bad", "setstate_forever.pt") + " did not end within 1 s"),
                 (["inspect", os.path.join(FIXTURES, "bad", "forward_forever.pt"), "--input", "2x4"], 4,
                  "forward on --input did not end within 1 s")]
        for args, code, says in cases:
            with self.subTest(model=args[1]):
                result = run(*args, "--step-timeout", "1")  # the model loops: only the limit ends it
                self.assertExit(result, code, says)
                self.assertIn("Nothing was written", result.stderr)

    def test_a_step_that_never_ends_is_ended_by_step_timeout(self):
        model = os.path.join(FIXTURES, "bad", "forward_forever.pt")
        out = self.out()
        result = run("capture", model, "--input", "2x4", "--out", out, "--steps", "3", "--step-timeout", "2")
        self.assertExit(result, 4, "did not end within --step-timeout 2 s")
        with open(os.path.join(out, "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual(manifest["interrupted"], "step timeout")
        self.assertEqual(manifest["steps"], 0)

    def test_operator_libraries(self):
        model = os.path.join(FIXTURES, "custom_op.pt")
        missing = run("inspect", model)  # native code of a library not loaded: refused as code, exit 9
        self.assertExit(missing, 9, "hookscope_test::scale")
        self.assertIn("--load-library", missing.stderr)
        self.assertExit(run("inspect", model, "--load-library", os.path.join(self.tmp, "none.so")), 3,
                        "No operator library at")
        loaded = run("inspect", model, "--input", "3x4", "--load-library", os.environ["HOOKSCOPE_TEST_OPS"])
        self.assertExit(loaded, 0)
        self.assertIn("3x2", loaded.stdout)

    def test_unreadable_or_rejected_data_exits_4(self):
        self.assertExit(run("capture", CNN, "--out", self.out(), "--data", os.path.join(self.tmp, "none.pt")),
                        4, "cannot")
        result = run("capture", CNN, "--out", self.out(), "--input", "8x3x32x32")
        self.assertExit(result, 4, "8x3x32x32")
        self.assertIn("channels", result.stderr)
        self.assertFalse(os.path.exists(self.out()), "no export for a failed run")
        for name in ("zero_samples.data.pt", "zero_samples_targets.data.pt"):
            self.assertExit(run("capture", CNN, "--out", self.out(), "--data", os.path.join(FIXTURES, name)),
                            4, "holds no samples")
        self.assertExit(run("capture", CNN, "--out", self.out(), "--data", os.path.join(FIXTURES, "bad", "bomb.data.pt")),
                        4, "HOOKSCOPE_MAX_INFLATE_MIB")
        self.assertExit(run("capture", CNN, "--out", self.out(), "--steps", "1",
                            "--data", os.path.join(FIXTURES, "list_inputs.data.pt")), 0)

    def test_unwritable_output_exits_5(self):
        os.makedirs(self.out())
        with open(os.path.join(self.out(), "keep.txt"), "w") as f:
            f.write("precious")
        os.makedirs(os.path.join(self.out(), "sub"))
        # A folder that is not a HookScope export is never replaced, --force or not.
        for force in ([], ["--force"]):
            self.assertExit(run("capture", CNN, "--out", self.out(), "--steps", "1", *force), 5,
                            "not a HookScope export")
            self.assertTrue(os.path.exists(os.path.join(self.out(), "keep.txt")))
            self.assertTrue(os.path.isdir(os.path.join(self.out(), "sub")))
        a_file = os.path.join(self.tmp, "a_file")
        open(a_file, "w").close()
        self.assertExit(run("capture", CNN, "--out", a_file, "--steps", "1"), 5, "is a file")
        # An export is replaced only with --force, atomically: nothing is left beside it.
        export = self.out("run")
        self.assertExit(run("capture", CNN, "--out", export, "--steps", "1"), 0)
        self.assertExit(run("capture", CNN, "--out", export, "--steps", "1"), 5, "already holds a HookScope export")
        self.assertExit(run("capture", CNN, "--out", export, "--steps", "2", "--force"), 0)
        with open(os.path.join(export, "manifest.json")) as f:
            self.assertEqual(json.load(f)["steps"], 2)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["a_file", "export", "run"])
        # --force replaces what HookScope wrote, never what the user put beside it: a real export
        # with notes and a sub-folder added, and a folder whose manifest merely claims to be one.
        with open(os.path.join(export, "notes.txt"), "w") as f:
            f.write("my notes")
        os.makedirs(os.path.join(export, "sub"))
        self.assertExit(run("capture", CNN, "--out", export, "--steps", "1", "--force"), 5,
                        "holds notes.txt, sub/ beside the export")
        self.assertTrue(os.path.exists(os.path.join(export, "notes.txt")))
        with open(os.path.join(export, "manifest.json")) as f:
            self.assertEqual(json.load(f)["steps"], 2)  # the export itself untouched too
        forged = self.out("forged")
        os.makedirs(forged)
        with open(os.path.join(forged, "manifest.json"), "w") as f:
            json.dump({"format": "hookscope-capture"}, f)
        with open(os.path.join(forged, "thesis.tex"), "w") as f:
            f.write("\\documentclass{article}")
        self.assertExit(run("capture", CNN, "--out", forged, "--steps", "1", "--force"), 5, "holds thesis.tex")
        self.assertTrue(os.path.exists(os.path.join(forged, "thesis.tex")))

    def test_out_dot_is_checked_before_the_run_with_the_real_reason(self):
        here = self.out("here")
        os.makedirs(here)
        open(os.path.join(here, "notes.txt"), "w").close()
        result = subprocess.run([os.path.abspath(CLI), "capture", os.path.abspath(CNN), "--out", ".", "--force",
                                 "--steps", "500"], cwd=here, capture_output=True, text=True, timeout=DEADLINE)
        self.assertExit(result, 5, "not a HookScope export")
        self.assertNotIn("step 1/", result.stderr, "refused before the run, not after it")
        self.assertNotIn("Success", result.stderr)

    def test_leftovers_of_a_killed_write_are_removed_and_reported(self):
        dead = subprocess.Popen(["true"])
        dead.wait()
        leftover = os.path.join(self.tmp, f".export.hookscope-tmp-{dead.pid}")
        os.makedirs(leftover)
        result = run("capture", CNN, "--out", self.out("export"), "--steps", "1")
        self.assertExit(result, 0)
        self.assertIn("removed " + leftover, result.stderr)
        self.assertFalse(os.path.exists(leftover))


class Progress(CliTestCase):
    """On a terminal, one progress line updated in place; in a pipe or with --verbose, a line a step."""

    def capture_on_a_terminal(self, *extra):
        import pty
        leader, follower = pty.openpty()
        proc = subprocess.Popen([CLI, "capture", CNN, "--out", self.out(), "--hook", "*", "--steps", "4", "--force",
                                 *extra], stdout=follower, stderr=follower)
        os.close(follower)
        text = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the follower side closed: the process ended
                break
            if not chunk:
                break
            text += chunk
        os.close(leader)
        self.assertEqual(proc.wait(timeout=DEADLINE), 0, text)
        return text.decode()

    def test_a_terminal_gets_one_line_rewritten_in_place(self):
        text = self.capture_on_a_terminal()
        progress = [line for line in text.split("\r\n") if "step 1/4" in line]
        self.assertEqual(len(progress), 1, text)  # every step on that one line
        updates = progress[0].split("\r\x1b[K")[1:]
        self.assertEqual([u.split()[1] for u in updates], ["1/4", "2/4", "3/4", "4/4"])
        self.assertRegex(updates[0], r"steps/s  ETA \d+ s  loss [0-9.]+  \d+ captures  [0-9.]+/512 MiB$")
        self.assertIn("88 captures", updates[3])  # 22 series (small_cnn, every module) x 4 steps

    def test_verbose_and_a_pipe_get_a_line_per_step(self):
        text = self.capture_on_a_terminal("--verbose")
        self.assertNotIn("\x1b[K", text)
        self.assertEqual(len([line for line in text.split("\r\n") if line.startswith("step ")]), 4, text)
        piped = run("capture", CNN, "--out", self.out(), "--hook", "*", "--steps", "4", "--force")
        self.assertExit(piped, 0)
        self.assertEqual([line.split()[1] for line in piped.stderr.splitlines() if line.startswith("step ")],
                         ["1/4", "2/4", "3/4", "4/4"])


class DefaultLoss(CliTestCase):
    def test_a_default_run_trains_instead_of_diverging(self):
        self.assertExit(run("capture", CNN, "--out", self.out(), "--steps", "80"), 0)
        with open(os.path.join(self.out(), "manifest.json")) as f:
            self.assertEqual(json.load(f)["loss"], "auto")
        losses = [float(r["value"]) for r in read_scalars(self.out()) if r["name"] == "loss"]
        self.assertEqual(len(losses), 80)
        self.assertTrue(all(math.isfinite(v) for v in losses), losses)
        self.assertLess(sum(losses[-10:]) / 10, 0.75 * sum(losses[:10]) / 10, losses)


class Interrupted(CliTestCase):
    def start(self, steps="100000"):
        process = subprocess.Popen([CLI, "capture", CNN, "--out", self.out(), "--steps", steps],
                                   stderr=subprocess.PIPE, text=True)
        for line in process.stderr:  # progress lines: "step N/M ..."
            if line.startswith("step 5/"):
                break
        return process

    def test_first_signal_stops_after_the_step_and_writes_what_was_captured(self):
        for signo, code, name in [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")]:
            with self.subTest(signal=name):
                shutil.rmtree(self.out(), ignore_errors=True)
                process = self.start()
                process.send_signal(signo)
                rest = process.stderr.read()
                self.assertEqual(process.wait(timeout=DEADLINE), code, rest)
                self.assertIn("interrupted by " + name, rest)
                with open(os.path.join(self.out(), "manifest.json")) as f:
                    manifest = json.load(f)
                self.assertEqual(manifest["interrupted"], name)
                self.assertGreaterEqual(manifest["steps"], 5)
                losses = [r for r in read_scalars(self.out()) if r["name"] == "loss"]
                self.assertEqual([int(r["step"]) for r in losses], list(range(manifest["steps"])))
                # The step named is the export's own: the last one kept (steps count from 0).
                self.assertIn("interrupted: by %s after step %d (%d steps)" % (name, manifest["steps"] - 1,
                                                                              manifest["steps"]),
                              run("show", self.out()).stdout)

    def test_a_second_signal_ends_it_at_once(self):
        process = self.start()
        process.send_signal(signal.SIGINT)
        process.send_signal(signal.SIGTERM)
        process.stderr.read()
        # Whichever of the two is handled second ends the process as its default action would.
        self.assertIn(process.wait(timeout=DEADLINE), (-signal.SIGINT, -signal.SIGTERM))
        self.assertFalse(os.path.exists(os.path.join(self.out(), "manifest.json")))


class Breakpoints(CliTestCase):
    def test_break_on_a_rule_exits_6_with_a_complete_export(self):
        result = run("capture", os.path.join(MODELS, "small_mlp.pt"), "--out", self.out(), "--hook", "*",
                     "--data", os.path.join(FIXTURES, "teacher.data.pt"), "--batch-size", "32",
                     "--loss", "cross_entropy", "--lr", "50", "--steps", "60",
                     "--break", "exploding_gradient")
        self.assertExit(result, 6, "exploding_gradient")
        with open(os.path.join(self.out(), "manifest.json")) as f:
            steps = json.load(f)["steps"]
        self.assertLess(steps, 60, "the run stopped early")
        with open(os.path.join(self.out(), "alerts.csv"), newline="") as f:
            alerts = list(csv.DictReader(f))
        self.assertEqual(list(alerts[0].keys()), ["step", "rank", "module", "kind", "rule", "value", "message", "last_step", "count"])
        fired = [a for a in alerts if a["rule"] == "exploding_gradient"]
        self.assertTrue(fired)
        self.assertEqual(int(fired[0]["step"]), steps - 1, "stopped after the step where it fired")
        self.assertTrue(all(int(a["step"]) < steps for a in alerts))
        # The export holds every step up to the break.
        self.assertEqual({int(r["step"]) for r in read_stats(self.out())}, set(range(steps)))

    def test_thresholds_can_be_changed(self):
        common = ["--hook", "relu*", "--kinds", "activation", "--steps", "1"]
        self.assertExit(run("capture", CNN, "--out", self.out("a"), *common), 0)
        self.assertExit(run("capture", CNN, "--out", self.out("b"), *common, "--threshold", "dead_units=0.3"), 0)

        def dead(folder):
            with open(os.path.join(folder, "alerts.csv"), newline="") as f:
                return [a for a in csv.DictReader(f) if a["rule"] == "dead_units"]
        # About half of a ReLU's outputs are zero: only the lowered threshold fires.
        self.assertEqual(dead(self.out("a")), [])
        self.assertTrue(dead(self.out("b")))
        self.assertExit(run("capture", CNN, "--out", self.out("c"), "--threshold", "dead_units=2"), 2, "fraction")
        self.assertExit(run("capture", CNN, "--out", self.out("c"), "--threshold", "non_finite=1"), 2, "no threshold")

    def test_alerts_csv_is_always_written_and_unknown_rules_are_usage_errors(self):
        self.assertExit(run("capture", CNN, "--out", self.out(), "--steps", "2"), 0)
        with open(os.path.join(self.out(), "alerts.csv")) as f:
            self.assertEqual(f.readline().strip(), "step,rank,module,kind,rule,value,message,last_step,count")
        self.assertExit(run("capture", CNN, "--out", self.out("b"), "--break", "bogus"), 2, "bogus")


class Interventions(CliTestCase):
    def test_clamp_grad_changes_earlier_gradients_and_is_listed_in_the_manifest(self):
        common = ["--hook", "*", "--kinds", "param_grad", "--data", os.path.join(FIXTURES, "sgd.data.pt"),
                  "--loss", "cross_entropy", "--optimizer", "none", "--steps", "1"]
        self.assertExit(run("capture", CNN, "--out", self.out("plain"), *common), 0)
        self.assertExit(run("capture", CNN, "--out", self.out("clamped"), *common, "--clamp-grad", "fc1=0.001"), 0)
        with open(os.path.join(self.out("clamped"), "manifest.json")) as f:
            interventions = json.load(f)["interventions"]
        self.assertEqual(interventions, [{"module": "fc1", "target": "gradient", "action": "clamp 0.001",
                                          "from_step": 0, "to_step": 0}])

        def grad_norm(folder, name):
            return next(float(r["l2norm"]) for r in read_stats(folder) if r["module"] == name)
        # Behind fc1 the gradients change; fc1's own weight gradient and fc2's do not.
        self.assertNotAlmostEqual(grad_norm(self.out("plain"), "conv1.weight"), grad_norm(self.out("clamped"), "conv1.weight"), places=6)
        self.assertEqual(grad_norm(self.out("plain"), "fc2.weight"), grad_norm(self.out("clamped"), "fc2.weight"))

    def test_zero_output_ablates_and_is_listed(self):
        result = run("capture", CNN, "--out", self.out(), "--hook", "fc2", "--kinds", "activation",
                     "--steps", "1", "--zero-output", "relu3")
        self.assertExit(result, 0)
        with open(os.path.join(self.out(), "manifest.json")) as f:
            self.assertEqual(json.load(f)["interventions"][0],
                             {"module": "relu3", "target": "output", "action": "zero", "from_step": 0, "to_step": 0})
        # fc2 sees zeros, so every sample's output is fc2's bias: no spread across the batch.
        rows = read_stats(self.out())
        self.assertEqual(len(rows), 1)
        bias_only = torch.jit.load(CNN).fc2.bias.detach().double()
        self.assertAlmostEqual(float(rows[0]["mean"]), bias_only.mean().item(), places=6)
        self.assertExit(run("capture", CNN, "--out", self.out("b"), "--zero-output", "nothing"), 2, "matches no")

    def test_bad_intervention_options_are_usage_errors(self):
        self.assertExit(run("capture", CNN, "--out", self.out(), "--clamp-grad", "nothing=1"), 2, "matches no module")
        self.assertExit(run("capture", CNN, "--out", self.out(), "--clamp-grad", "fc1=-1"), 2, "positive")
        self.assertExit(run("capture", CNN, "--out", self.out(), "--scale-grad", "fc1"), 2, "PATTERN=VALUE")


class Inspect(CliTestCase):
    def test_tree_and_output_shapes(self):
        result = run("inspect", CNN, "--input", "8x1x28x28")
        self.assertExit(result, 0)
        lines = result.stdout.splitlines()
        conv2 = next(line for line in lines if line.strip().startswith("conv2 "))
        self.assertIn("Conv2d", conv2)
        self.assertIn("1168", conv2)
        self.assertIn("8x16x14x14", conv2)
        self.assertIn("(root SmallCNN)", result.stdout)


    def script(self, name, forward):
        """A model saved by this test's PyTorch: a Linear, then `forward`'s last line."""
        source = ("import torch\n"
                  "class M(torch.nn.Module):\n"
                  "    def __init__(self):\n"
                  "        super().__init__()\n"
                  "        self.fc = torch.nn.Linear(4, 4)\n" + forward)
        module_path = os.path.join(self.tmp, name + "_model.py")  # TorchScript reads the class's source
        with open(module_path, "w") as f:
            f.write(source)
        spec = importlib.util.spec_from_file_location(name + "_model", module_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        path = os.path.join(self.tmp, name + ".pt")
        torch.jit.script(module.M()).save(path)
        return path

    def test_inspect_computes_no_loss(self):
        # A model whose output is no tensor still shows its shapes: inspect runs the forward alone.
        model = self.script("counts", "    def forward(self, x):\n        return self.fc(x).shape[0]\n")
        result = run("inspect", model, "--input", "2x4")
        self.assertExit(result, 0)
        self.assertNotIn("loss", result.stderr)
        fc = next(line for line in result.stdout.splitlines() if line.strip().startswith("fc "))
        self.assertIn("2x4", fc)

    FAILING_MODELS = (
        "import torch, torch.nn as nn\n"
        "class Boom(nn.Module):\n"
        "    def forward(self, x):\n"
        "        if bool(x.sum() > -1e9):\n"
        "            raise ValueError('Boom refuses inputs like this one')\n"
        "        return x\n"
        "class Mismatch(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc1 = nn.Linear(8, 16)\n"
        "        self.fc2 = nn.Linear(8, 4)\n"
        "    def forward(self, x):\n"
        "        return self.fc2(self.fc1(x))\n"
        "class Raises(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc1 = nn.Linear(8, 8)\n"
        "        self.inner = nn.Sequential(nn.ReLU(), Boom())\n"
        "    def forward(self, x):\n"
        "        return self.inner(self.fc1(x))\n")

    def test_an_exception_in_the_forward_names_the_module_that_raised_it(self):
        # Both engines (TorchScript, and a pickle the Python engine runs): the innermost module whose
        # forward was running, and the exception as Python says it; the input is blamed only when
        # the module that failed was handed it.
        folder = os.path.join(self.tmp, "failing")
        os.makedirs(folder)
        with open(os.path.join(folder, "failing_models.py"), "w") as f:
            f.write(self.FAILING_MODELS)
        spec = importlib.util.spec_from_file_location("failing_models", os.path.join(folder, "failing_models.py"))
        models = importlib.util.module_from_spec(spec)
        sys.modules["failing_models"] = models
        try:
            spec.loader.exec_module(models)
            files = {}
            for name in ("Mismatch", "Raises"):
                files[name, "script"] = os.path.join(self.tmp, name + ".pt")
                torch.jit.script(getattr(models, name)()).save(files[name, "script"])
                files[name, "pickle"] = os.path.join(self.tmp, name + "_pickle.pt")
                torch.save(getattr(models, name)(), files[name, "pickle"])
        finally:
            del sys.modules["failing_models"]
        for form in ("script", "pickle"):
            extra = ["--trust", "--python-path", folder] if form == "pickle" else []
            def capture(name, shape):
                return run("capture", files[name, form], "--input", shape, "--steps", "1",
                           "--out", self.out(name + form + shape), *extra)
            with self.subTest(form=form):
                result = capture("Mismatch", "4x8")
                self.assertExit(result, 4, "the forward failed in module 'fc2' (Linear)")
                self.assertIn("RuntimeError: mat1 and mat2 shapes cannot be multiplied", result.stderr)
                self.assertNotIn("rejected the input", result.stderr)
                result = capture("Raises", "4x8")
                self.assertExit(result, 4, "the forward failed in module 'inner.1' (Boom)")
                self.assertIn("ValueError: Boom refuses inputs like this one", result.stderr)
                result = capture("Mismatch", "4x9")
                self.assertExit(result, 4, "the model rejected the input (4x9")
                self.assertIn("in module 'fc1' (Linear)", result.stderr)

    def test_a_failed_forward_says_what_happened(self):
        # The model's own huge allocation and a missing forward are not blamed on the input.
        huge = self.script("huge", "    def forward(self, x):\n        return self.fc(x) + torch.empty(1 << 42).sum()\n")
        result = run("inspect", huge, "--input", "2x4")
        self.assertExit(result, 4, "asked for 1.64e+04 GiB of memory")
        self.assertNotIn("rejected the input", result.stderr)
        result = run("capture", huge, "--input", "2x4", "--out", self.out(), "--steps", "1")
        self.assertExit(result, 4, "asked for 1.64e+04 GiB of memory")
        helper = self.script("helper", "    @torch.jit.export\n    def helper(self, x):\n        return self.fc(x)\n")
        result = run("inspect", helper, "--input", "2x4")
        self.assertExit(result, 4, "has no forward method")

    def test_a_hooked_module_never_called_is_named_with_why(self):
        # Its forward never calls fc (as a trace drops a StochasticDepth): said by inspect and by
        # capture, with the way out, instead of an export with nothing for it.
        model = self.script("skips", "    def forward(self, x):\n        return x * 2\n")
        result = run("inspect", model, "--input", "2x4")
        self.assertExit(result, 0)
        self.assertIn("1 module was not called on this input", result.stderr)
        self.assertIn(": fc.", result.stderr)
        self.assertIn("torch.jit.script", result.stderr)
        result = run("capture", model, "--input", "2x4", "--hook", "*", "--out", self.out(), "--steps", "2", "--loss", "mean")
        self.assertExit(result, 0)
        self.assertIn("1 module was not called in any step", result.stderr)
        result = run("capture", CNN, "--hook", "*", "--out", self.out("cnn"), "--steps", "1")
        self.assertExit(result, 0)
        self.assertNotIn("not called", result.stderr)

    def test_names_from_a_file_cannot_drive_the_terminal(self):
        # A module named with ESC[31m (red) and U+202E (right-to-left): printed escaped.
        result = subprocess.run([CLI, "inspect", os.path.join(FIXTURES, "bad", "escape_names.pt"), "--input", "3x2"],
                                capture_output=True, timeout=DEADLINE)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn(b"\x1b", result.stdout)
        self.assertNotIn("\u202e".encode(), result.stdout)
        self.assertIn(b"x\\x1b[31mred\\u{202e}", result.stdout)
        self.assertIn(b"fc ", result.stdout)
        # A file name with an escape and a byte that is not UTF-8, in an error message.
        path = os.path.join(self.tmp.encode(), b"evil\x1b]0;title\x07\xe7.pt")
        result = subprocess.run([CLI.encode(), b"inspect", path], capture_output=True, timeout=DEADLINE)
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertNotIn(b"\x1b", result.stderr)
        self.assertIn(b"evil\\x1b]0;title\\x07\\xe7.pt", result.stderr)
        result.stderr.decode("utf-8")  # valid UTF-8 throughout


class ExportFolder(CliTestCase):
    def test_a_lock_left_by_a_killed_write_is_removed(self):
        # SIGKILL (or a second Ctrl+C) leaves a writer's lock file; no process holds its lock, so
        # the next export into that folder removes it and says so. A held lock is left alone.
        stale = os.path.join(self.tmp, ".killed-run.hookscope-lock-file")
        with open(stale, "w"):
            pass
        result = run("capture", CNN, "--out", self.out(), "--steps", "1")
        self.assertExit(result, 0)
        self.assertFalse(os.path.exists(stale))
        self.assertIn("a lock left by a HookScope write that was killed", result.stderr)
        self.assertEqual([n for n in os.listdir(self.tmp) if "hookscope-lock" in n], [])

    def test_a_name_too_long_is_blamed_on_the_name(self):
        # 250 bytes fit the file system; with HookScope's temporary prefix beside it they do not.
        # Nothing existed there, so nothing is said to be "unchanged".
        out = os.path.join(self.tmp, "r" * 250)
        result = run("capture", CNN, "--out", out, "--steps", "1")
        self.assertExit(result, 5, "is too long")
        self.assertNotIn("unchanged", result.stderr)
        self.assertNotIn("cannot write into " + self.tmp, result.stderr)
        self.assertFalse(os.path.exists(out))

    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="hookscope-export-")
        cls.export = os.path.join(cls.folder, "run")
        cls.result = run("capture", CNN, "--out", cls.export, "--hook", "*", "--steps", "3", "--bins", "16",
                         "--kinds", "activation,gradient,input,param,param_grad,update",
                         "--save-tensors", "fc1", "--seed", "4")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.folder, ignore_errors=True)

    def test_capture_succeeded_with_progress(self):
        self.assertEqual(self.result.returncode, 0, self.result.stderr)
        self.assertIn("step 3/3", self.result.stderr)
        self.assertIn("steps/s", self.result.stderr)

    def test_manifest(self):
        with open(os.path.join(self.export, "manifest.json")) as f:
            m = json.load(f)
        self.assertEqual(m["format"], "hookscope-capture")
        self.assertEqual(m["version"], 3)
        self.assertEqual(m["ranks"], [{"rank": 0}])
        with open(CNN, "rb") as f:
            self.assertEqual(m["model"]["sha256"], hashlib.sha256(f.read()).hexdigest())
        self.assertEqual(m["model"]["file"], "small_cnn.pt")
        self.assertRegex(m["created_utc"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual(m["steps"], 3)
        self.assertEqual(m["bins"], 16)
        self.assertEqual(m["seed"], 4)
        self.assertEqual(m["inputs"], ["8x1x28x28"])
        self.assertEqual((m["optimizer"], m["lr"]), ("sgd", 0.01))
        self.assertFalse(m["thinned"])
        modules = {h["module"]: h["kinds"] for h in m["hooked"]}
        self.assertIn("", modules)
        self.assertEqual(len(modules), 11)
        self.assertIn("param_grad", modules["fc1"])

    def test_stats_csv(self):
        with open(os.path.join(self.export, "stats.csv")) as f:
            self.assertEqual(f.readline().strip(), HEADER)
        rows = read_stats(self.export)
        kinds = {r["kind"] for r in rows}
        self.assertEqual(kinds, {"activation", "input", "gradient", "param", "param_grad", "update"})
        self.assertEqual({int(r["step"]) for r in rows}, {0, 1, 2})
        root = [r for r in rows if r["module"] == "" and r["kind"] == "activation"]
        self.assertEqual(len(root), 3)
        self.assertEqual(root[0]["shape"], "8x10")
        params = {r["module"] for r in rows if r["kind"] == "param_grad"}
        self.assertIn("fc1.weight", params)
        for r in rows:
            self.assertEqual(int(r["call"]), 0)
            float(r["min"]), float(r["l2norm"])  # parseable, nan/inf spelled so

    def test_numbers_equal_python_on_the_saved_tensor(self):
        tensors = torch.load(os.path.join(self.export, "tensors.pt"), weights_only=True)
        self.assertEqual(list(tensors), ["fc1/0/0"])
        t = tensors["fc1/0/0"].double()
        self.assertEqual(list(t.shape), [8, 64])
        row = next(r for r in read_stats(self.export)
                   if r["module"] == "fc1" and r["kind"] == "activation" and r["step"] == "2")
        # float32 sums run in float over blocks of 256 values, then in double: ~1e-8 typically.
        self.assertTrue(close(float(row["l2norm"]), t.norm().item(), 1e-7))
        self.assertTrue(close(float(row["mean"]), t.mean().item(), 1e-7, t.abs().max().item()))
        self.assertTrue(close(float(row["std"]), t.std().item(), 1e-7))
        self.assertEqual(float(row["min"]), t.min().item())
        self.assertEqual(float(row["max"]), t.max().item())
        self.assertEqual(float(row["zero_frac"]), (t == 0).double().mean().item())
        # What float16 and fp8 would lose (docs/export-format.md), by the engine's C++ kernel.
        a = t.abs()
        amax = a.max().item()
        nonzero = a[a > 0]
        self.assertEqual(float(row["amax"]), amax)
        self.assertEqual(int(row["f16_overflow"]), int((a > 65504).sum()))
        self.assertEqual(int(row["f16_underflow"]), int((nonzero < 2.0 ** -24).sum()))
        self.assertEqual(int(row["e4m3_underflow"]), int((nonzero * 448 < amax * 2.0 ** -9).sum()))
        self.assertEqual(int(row["e5m2_underflow"]), int((nonzero * 57344 < amax * 2.0 ** -16).sum()))
        # histograms.pt carries them per step beside the histogram.
        entry = torch.load(os.path.join(self.export, "histograms.pt"), weights_only=True)["rank0/activation/fc1/0/0"]
        at = entry["steps"].tolist().index(2)
        self.assertEqual(entry["amax"][at].item(), amax)
        self.assertEqual([entry[k][at].item() for k in ("f16_overflow", "f16_underflow", "e4m3_underflow",
                                                         "e5m2_underflow")],
                         [int(row[k]) for k in ("f16_overflow", "f16_underflow", "e4m3_underflow", "e5m2_underflow")])

    def copy_of_export(self, name):
        copy = os.path.join(self.folder, name)
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(self.export, copy)
        return copy

    def test_histograms_pt_saved_by_pytorch_reads_back_the_same(self):
        # HookScope reads histograms.pt without LibTorch: PyTorch's own torch.save of the same
        # dict (another pickler, another zip writer) must read back to the same summary.
        copy = self.copy_of_export("resaved")
        path = os.path.join(copy, "histograms.pt")
        torch.save(torch.load(path, weights_only=True), path)
        ours = run("show", self.export)
        theirs = run("show", copy)
        self.assertEqual(theirs.returncode, 0, theirs.stderr)
        self.assertEqual(theirs.stdout.replace(copy, self.export), ours.stdout)

    def test_a_storage_that_claims_more_than_its_record_holds_is_refused(self):
        # The pickle says how many values a storage has; only the zip's record says how many it
        # really holds. A record cut to 8 bytes must be refused, never read past.
        copy = self.copy_of_export("short-storage")
        path = os.path.join(copy, "histograms.pt")
        with zipfile.ZipFile(path) as z:
            records = {n: z.read(n) for n in z.namelist()}
        storage = sorted(n for n in records if "/data/" in n)[1]
        records[storage] = records[storage][:8]
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
            for n, data in records.items():
                z.writestr(n, data)
        result = run("show", copy)
        self.assertEqual(result.returncode, 4, result.stderr)
        self.assertIn("histograms.pt", result.stderr)
        self.assertIn("but its storage record holds 8", result.stderr)

    def test_numbers_out_of_range_in_the_manifest_name_their_field(self):
        # nlohmann's conversion of 1e300 to an integer is undefined behaviour (UBSan caught it);
        # the release build printed "-9223372036854775808 steps". Each such field is refused by name.
        for field, value in (("steps", 1e300), ("batch_size", 1e300), ("bins", 2.5), ("seed", -1), ("lr", "fast")):
            copy = self.copy_of_export("manifest-" + field)
            path = os.path.join(copy, "manifest.json")
            with open(path) as f:
                m = json.load(f)
            m[field] = value
            with open(path, "w") as f:
                json.dump(m, f)
            result = run("show", copy)
            self.assertEqual(result.returncode, 4, result.stdout + result.stderr)
            self.assertIn("manifest.json", result.stderr)
            self.assertIn('"%s" is' % field, result.stderr)
            self.assertNotIn("9223372036854775808 steps", result.stdout)

    def test_histograms_pt(self):
        hist = torch.load(os.path.join(self.export, "histograms.pt"), weights_only=True)
        rows = read_stats(self.export)
        self.assertEqual(len(hist), len({(r["kind"], r["module"], r["call"], r["index"]) for r in rows}))
        for r in rows:
            self.assertEqual(r["rank"], "0")
            entry = hist[f'rank0/{r["kind"]}/{r["module"]}/{r["call"]}/{r["index"]}']
            self.assertEqual(entry["steps"].dtype, torch.int64)
            self.assertEqual(entry["counts"].dtype, torch.int64)
            self.assertEqual(entry["edges"].dtype, torch.float64)
            self.assertEqual(list(entry["counts"].shape), [3, 16])
            self.assertEqual(list(entry["edges"].shape), [3, 17])
            i = entry["steps"].tolist().index(int(r["step"]))
            finite = int(r["numel"]) - int(r["nan_count"]) - int(r["inf_count"])
            self.assertEqual(int(entry["counts"][i].sum()), finite)
            if finite and float(r["max"]) > float(r["min"]):
                self.assertEqual(entry["edges"][i][0].item(), float(r["min"]))
                self.assertEqual(entry["edges"][i][-1].item(), float(r["max"]))

    def test_scalars_csv(self):
        with open(os.path.join(self.export, "scalars.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        names = {r["name"] for r in rows}
        self.assertTrue({"loss", "lr", "step_ms"} <= names)
        self.assertEqual(len([r for r in rows if r["name"] == "loss"]), 3)
        self.assertTrue(all(float(r["value"]) == 0.01 for r in rows if r["name"] == "lr"))

    def test_show_reads_it(self):
        result = run("show", self.export)
        self.assertExit(result, 0)
        self.assertIn("small_cnn.pt", result.stdout)
        self.assertIn("3 steps", result.stdout)
        self.assertIn("activation fc1 0/0", result.stdout)
        self.assertExit(run("show", self.tmp), 4, "no manifest.json")

    def test_show_says_which_series_have_gaps(self):
        fc1 = [line for line in run("show", self.export).stdout.splitlines() if line.startswith("activation fc1 0/0")]
        self.assertEqual(len(fc1), 1)
        self.assertTrue(fc1[0].endswith("none"), fc1[0])
        # The same export without fc1's activation at step 1: a gap there, and only there.
        holed = self.out("holed")
        shutil.copytree(self.export, holed)
        rows = read_stats(holed)
        with open(os.path.join(holed, "stats.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=HEADER.split(","), lineterminator="\n")
            writer.writeheader()
            writer.writerows(r for r in rows if not (r["step"] == "1" and r["module"] == "fc1"
                                                     and r["kind"] == "activation"))
        with open(os.path.join(holed, "manifest.json")) as f:
            manifest = json.load(f)
        manifest["rows"]["stats.csv"] -= 1  # as a run with that gap would say (else: "cut")
        with open(os.path.join(holed, "manifest.json"), "w") as f:
            json.dump(manifest, f)
        histograms = torch.load(os.path.join(holed, "histograms.pt"), weights_only=True)  # and its table
        table = histograms["rank0/activation/fc1/0/0"]
        keep = (table["steps"] != 1).nonzero().flatten()
        histograms["rank0/activation/fc1/0/0"] = {k: v[keep] if torch.is_tensor(v) and v.dim() else v
                                                  for k, v in table.items()}
        torch.save(histograms, os.path.join(holed, "histograms.pt"))
        lines = run("show", holed).stdout.splitlines()
        self.assertIn("1 step, first 1", [line for line in lines if line.startswith("activation fc1 0/0")][0])
        self.assertTrue([line for line in lines if line.startswith("gradient fc1 0/0")][0].endswith("none"))


class ReadUnderACap(CliTestCase):
    """Issue 58: the commands that read an export (show, compare, explain, report) read one larger
    than their --memory-cap at every k-th step, as the window does, and say so; by default the cap
    is half the memory available, which a small export never reaches."""

    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="hookscope-capped-")
        cls.export = os.path.join(cls.folder, "run")
        cls.result = run("capture", CNN, "--out", cls.export, "--hook", "*", "--steps", "40", "--bins", "256",
                         "--seed", "3")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.folder, ignore_errors=True)

    def test_each_reader_says_it_read_every_kth_step_and_works_on_those(self):
        self.assertExit(self.result, 0)
        whole = run("compare", self.export, self.export)
        self.assertExit(whole, 0)
        self.assertIn("no divergence over 40 steps", whole.stdout)
        self.assertNotIn("was read at", whole.stderr)
        capped = run("compare", self.export, self.export, "--memory-cap", "1")
        self.assertExit(capped, 0)
        said = [line for line in capped.stderr.splitlines() if "was read at 1 step in" in line]
        self.assertEqual(len(said), 2, capped.stderr)  # each run read
        kept = int(said[0].split(" was read at 1 step in ")[1].split(" (")[1].split(" of its 40 steps")[0])
        self.assertLess(kept, 40)
        self.assertIn("--memory-cap MIB reads more", said[0])
        self.assertIn("no divergence over %d steps" % kept, capped.stdout)
        shown = run("show", self.export, "--memory-cap", "1")
        self.assertExit(shown, 0)
        self.assertIn("was read at 1 step in", shown.stderr)
        self.assertIn("activation fc1 0/0", shown.stdout)
        explained = run("explain", self.export, "--memory-cap", "1")
        self.assertExit(explained, 0)
        self.assertIn("was read at 1 step in", explained.stderr)
        html = os.path.join(self.tmp, "report.html")
        report = run("report", self.export, "--out", html, "--memory-cap", "1")
        if report.returncode == 8:
            self.skipTest("hookscope-report is not built here (no window): " + report.stderr)
        self.assertExit(report, 0)
        self.assertIn("was read at 1 step in", report.stderr)
        with open(html, encoding="utf-8") as f:
            self.assertIn("the report is of those steps", f.read())


class OutputPaths(CliTestCase):
    """--force and every output path: only a regular file (or a HookScope export folder) is ever
    replaced; a device, FIFO, socket, folder or a link to one is refused with exit 5, named, and
    left as it was. The nodes are made in a temporary folder, never the real /dev ones."""

    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="hookscope-outputs-")
        cls.export = os.path.join(cls.folder, "run")
        cls.made = run("capture", CNN, "--out", cls.export, "--hook", "fc1", "--steps", "2")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.folder, ignore_errors=True)

    def nodes(self):
        """{kind named in the message: path} of special files, each made here."""
        made = {}
        fifo = os.path.join(self.tmp, "fifo")
        os.mkfifo(fifo)
        made["a FIFO (named pipe)"] = fifo
        sock_path = os.path.join(self.tmp, "sock")
        listening = socket.socket(socket.AF_UNIX)
        self.addCleanup(listening.close)
        listening.bind(sock_path)
        made["a socket"] = sock_path
        folder = os.path.join(self.tmp, "folder")
        os.mkdir(folder)
        made["a folder"] = folder
        link = os.path.join(self.tmp, "link")
        os.symlink(fifo, link)
        made["a symbolic link to a FIFO (named pipe)"] = link
        device = os.path.join(self.tmp, "full")
        try:  # a copy of /dev/full's node (root only)
            os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 7))
            made["a character device"] = device
        except (PermissionError, OSError):
            pass
        return made

    def assertUnchanged(self, path, mode):
        self.assertEqual(stat.S_IFMT(os.lstat(path).st_mode), stat.S_IFMT(mode), path)

    def test_report_replaces_only_a_regular_file(self):
        self.assertExit(self.made, 0)
        html = os.path.join(self.tmp, "report.html")
        first = run("report", self.export, "--out", html)
        if first.returncode == 8:
            self.skipTest("hookscope-report is not built here (no window): " + first.stderr)
        self.assertExit(first, 0)
        self.assertExit(run("report", self.export, "--out", html), 5, "exists: replace it with --force")
        self.assertExit(run("report", self.export, "--out", html, "--force"), 0)
        for kind, path in self.nodes().items():
            mode = os.lstat(path).st_mode
            result = run("report", self.export, "--out", path, "--force")
            self.assertExit(result, 5, path + " is " + kind + ", not a regular file")
            self.assertIn("even with --force", result.stderr)
            self.assertUnchanged(path, mode)

    def test_report_leaves_nothing_in_the_temporary_folder_and_says_only_what_it_wrote(self):
        # Without XDG_RUNTIME_DIR (a server, a CI job), Qt made $TMPDIR/runtime-$USER and left it.
        self.assertExit(self.made, 0)
        scratch = os.path.join(self.tmp, "scratch")
        os.mkdir(scratch)
        env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "DISPLAY", "QT_QPA_PLATFORM")}
        env["TMPDIR"] = scratch
        result = subprocess.run([CLI, "report", self.export, "--out", os.path.join(self.tmp, "r.html")],
                                capture_output=True, text=True, timeout=DEADLINE, env=env)
        if result.returncode == 8:
            self.skipTest("hookscope-report is not built here (no window): " + result.stderr)
        self.assertExit(result, 0)
        self.assertEqual(os.listdir(scratch), [])
        # Nothing but what the report says: no line a plot for the offscreen platform (28 of
        # "This plugin does not support propagateSizeHints()"); on a busy machine, past a second,
        # its progress line ("report: drawing ... 2 s", "report: done in 2 s").
        said = [line for line in result.stderr.splitlines() if not line.startswith(("wrote ", "report: "))]
        self.assertEqual(said, [], result.stderr)

    def test_compare_csv_replaces_an_existing_file_only_with_force_and_never_a_special_file(self):
        self.assertExit(self.made, 0)
        csv_path = os.path.join(self.tmp, "diff.csv")
        with open(csv_path, "w") as f:
            f.write("the user's own notes\n")
        result = run("compare", self.export, self.export, "--csv", csv_path)
        self.assertExit(result, 5, "exists: replace it with --force")
        with open(csv_path) as f:
            self.assertEqual(f.read(), "the user's own notes\n")
        self.assertExit(run("compare", self.export, self.export, "--csv", csv_path, "--force"), 0)
        with open(csv_path) as f:
            self.assertTrue(f.read().startswith("step,kind,module"))
        for kind, path in self.nodes().items():  # a FIFO with no reader would hang a plain open()
            mode = os.lstat(path).st_mode
            self.assertExit(run("compare", self.export, self.export, "--csv", path, "--force"), 5, kind)
            self.assertUnchanged(path, mode)

    def test_an_export_folder_is_never_made_over_a_special_file(self):
        for kind, path in self.nodes().items():
            if kind == "a folder":
                continue  # an empty folder is a fine export folder
            mode = os.lstat(path).st_mode
            result = run("capture", CNN, "--out", path, "--steps", "1", "--force")
            self.assertExit(result, 5)
            self.assertIn(kind if "link" not in kind else "symbolic link", result.stderr)
            self.assertUnchanged(path, mode)


class DamagedRecords(CliTestCase):
    """Every record HookScope reads from a zip is checked against its CRC-32: a flipped byte in a
    histograms.pt record is exit 4 naming the record, never other numbers with exit 0."""

    def test_a_flipped_byte_in_any_record_of_histograms_pt_is_named(self):
        made = run("capture", CNN, "--out", self.out("run"), "--hook", "fc1", "--steps", "3")
        self.assertExit(made, 0)
        with zipfile.ZipFile(os.path.join(self.out("run"), "histograms.pt")) as z:
            records = [i.filename for i in z.infolist() if i.file_size > 0]
        self.assertGreater(len(records), 3)
        for record in records:
            with self.subTest(record=record):
                copy = self.out("damaged")
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(self.out("run"), copy)
                flip_a_byte_in(os.path.join(copy, "histograms.pt"), record)
                for command in (("show", copy), ("compare", self.out("run"), copy)):
                    result = run(*command)
                    self.assertExit(result, 4, record)
                    self.assertIn("CRC-32", result.stderr)


class CraftedCounts(CliTestCase):
    """Counts read from an export are checked before any arithmetic on them (ASan/UBSan runs these
    through scripts/asan.sh): a stats.csv row whose numel is INT64_MIN is refused as damaged, and
    gaps of INT64_MAX captures are added without overflowing."""

    def test_a_row_with_counts_out_of_range_is_damaged_and_huge_gaps_do_not_overflow(self):
        made = run("capture", CNN, "--out", self.out("run"), "--hook", "fc1", "--steps", "2")
        self.assertExit(made, 0)
        for numel, nan in (("-9223372036854775808", "0"), ("10", "11"), ("10", "-1")):
            with self.subTest(numel=numel, nan=nan):
                copy = self.out("crafted")
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(self.out("run"), copy)
                rows = read_stats(copy)
                rows[0]["numel"], rows[0]["nan_count"] = numel, nan
                with open(os.path.join(copy, "stats.csv"), "w", newline="") as f:
                    writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
                    writer.writeheader()
                    writer.writerows(rows)
                for command in ("show", "export-tensorboard"):
                    args = (command, copy) + ((os.path.join(self.tmp, "tb"),) if command != "show" else ())
                    self.assertExit(run(*args), 4, "stats.csv")
        copy = self.out("gaps")
        shutil.copytree(self.out("run"), copy)
        with open(os.path.join(copy, "manifest.json")) as f:
            manifest = json.load(f)
        manifest["gaps"] = [{"step": s, "rank": 0, "captures": 9223372036854775807, "series": []} for s in (0, 1)]
        with open(os.path.join(copy, "manifest.json"), "w") as f:
            json.dump(manifest, f)
        result = run("show", copy)
        self.assertIn(result.returncode, (0, 4), result.stderr)
        self.assertNotIn("runtime error", result.stderr)


class ExportParity(CliTestCase):
    """stats.csv from the CLI against PyTorch's own hooks (golden files from the fixtures)."""

    def test_csv_equals_python_hooks(self):
        for name in ["parity_traced", "resnet18_scripted"]:
            with self.subTest(model=name):
                out = self.out(name)
                result = run("capture", os.path.join(FIXTURES, name + ".pt"), "--out", out, "--hook", "*",
                             "--data", os.path.join(FIXTURES, name + ".data.pt"), "--steps", "1",
                             "--loss", "mean", "--optimizer", "none")
                self.assertExit(result, 0)
                rows = {(r["kind"], r["module"], int(r["call"]), int(r["index"])): r for r in read_stats(out)}
                with open(os.path.join(FIXTURES, name + ".golden.json")) as f:
                    golden = json.load(f)
                count = 0
                for kind in ["activation", "gradient"]:
                    for ref in golden[kind]:
                        row = rows[(kind, ref["module"], ref["call"], ref["index"])]
                        rms = ref["l2"] / math.sqrt(max(1, ref["numel"]))
                        self.assertTrue(close(float(row["l2norm"]), ref["l2"]), (kind, ref, row))
                        self.assertTrue(close(float(row["mean"]), ref["mean"], scale=rms), (kind, ref, row))
                        self.assertTrue(close(float(row["min"]), ref["min"], scale=rms), (kind, ref, row))
                        self.assertTrue(close(float(row["max"]), ref["max"], scale=rms), (kind, ref, row))
                        count += 1
                self.assertEqual(count, len(rows))


if __name__ == "__main__":
    unittest.main()
