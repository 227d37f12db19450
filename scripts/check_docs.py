#!/usr/bin/env python3
"""Keeps the documentation true: runs every fenced ```sh block of README.md and docs/*.md, and
checks that every relative link points at a file that exists.

Each block runs in `bash -e`, in a scratch folder that links the checkout's build/, python/,
resources/, examples/ and .venv/, so the commands run as written and their outputs land in the
scratch folder. A block passes when it exits with 0 and no line of its output says that a
script trained without HookScope. A window a block leaves running is closed when the block
ends; a block that is itself a window passes when the window is still up after WINDOW_SECONDS.

Usage: check_docs.py [REPO]   (ctest runs it as `docs_commands`; QT_QPA_PLATFORM=offscreen)
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BLOCK_SECONDS = 300
WINDOW_SECONDS = 15
LINKED = ["build", "python", "resources", "examples", ".venv"]
# What the hookscope package says when it found no HookScope and trained unhooked.
UNHOOKED = re.compile(r"no viewer listens|training runs without HookScope")


def documents(repo):
    docs = os.path.join(repo, "docs")
    return [os.path.join(repo, "README.md")] + sorted(
        os.path.join(docs, name) for name in os.listdir(docs) if name.endswith(".md"))


def sh_blocks(text):
    """(line number, commands) of each ```sh block."""
    return [(text[:m.start()].count("\n") + 1, m.group(1))
            for m in re.finditer(r"^```sh\n(.*?)^```$", text, re.M | re.S)]


def broken_links(path, text):
    problems = []
    for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        if not os.path.exists(os.path.join(os.path.dirname(path), target)):
            line = text[:m.start()].count("\n") + 1
            problems.append(f"{path}:{line}: the link to {target} points at nothing")
    return problems


def stop(process):
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def run_block(repo, where, commands):
    scratch = tempfile.mkdtemp(prefix="hookscope-docs-")
    try:
        for name in LINKED:
            if os.path.exists(os.path.join(repo, name)):
                os.symlink(os.path.join(repo, name), os.path.join(scratch, name))
        env = dict(os.environ, QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"))
        log_path = os.path.join(scratch, "output.log")
        with open(log_path, "w") as log:
            process = subprocess.Popen(["bash", "-e", "-c", commands], cwd=scratch, env=env, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
            last = [line for line in commands.strip().splitlines() if line.strip()][-1]
            is_window = last.lstrip().startswith("build/gui/hookscope") and not last.rstrip().endswith("&")
            deadline = time.monotonic() + (WINDOW_SECONDS if is_window else BLOCK_SECONDS)
            while process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            running = process.poll() is None
            code = process.returncode
            stop(process)  # the block, and any window it left running
        output = open(log_path, errors="replace").read()
        if running and not is_window:
            return f"{where}: still running after {BLOCK_SECONDS} s\n{output}"
        if not running and code != 0:
            return f"{where}: exit {code}\n{output}"
        if is_window and not running:
            return f"{where}: the window closed by itself (exit {code})\n{output}"
        if UNHOOKED.search(output):
            return f"{where}: the script trained without HookScope\n{output}"
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    problems = []
    ran = 0
    for path in documents(repo):
        text = open(path).read()
        problems += broken_links(path, text)
        for line, commands in sh_blocks(text):
            where = f"{os.path.relpath(path, repo)}:{line}"
            started = time.monotonic()
            problem = run_block(repo, where, commands)
            ran += 1
            print(f"{'FAIL' if problem else 'ok'}  {where} ({time.monotonic() - started:.1f} s)", flush=True)
            if problem:
                problems.append(problem)
    if ran == 0:
        problems.append("no ```sh block found: the quick starts are not checked")
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{ran} command blocks run, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
