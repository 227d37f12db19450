"""python -m hookscope.engine serve|inspect MODEL ... (see hookscope/engine/__init__.py)."""

import argparse
import atexit
import os
import shutil
import sys
import tempfile
import warnings


def _fail(code, message):
    sys.stderr.write("hookscope-cli: %s\n" % message)
    sys.stderr.flush()
    return code


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hookscope.engine")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("checkpoint")
    p.add_argument("model")
    p.add_argument("--compare")
    p.add_argument("--csv", action="store_true")
    p.add_argument("--no-confine", dest="confine", action="store_false")
    for name in ("serve", "inspect"):
        p = sub.add_parser(name)
        p.add_argument("model")
        p.add_argument("--trust", action="store_true")
        p.add_argument("--python-path", action="append", default=[])
        p.add_argument("--no-confine", dest="confine", action="store_false")
        if name == "serve":
            p.add_argument("--address", default=os.environ.get("HOOKSCOPE_ADDRESS", ""))
        else:
            p.add_argument("--input", action="append", default=[])
    args = parser.parse_args(argv)

    import torch  # noqa: F401 (before confinement: importing reads files and may start threads)
    from .model_files import ModelFileError, load

    sock = None
    if args.command == "serve":
        # Connected before the confinement, which allows no new socket; the hello comes once the
        # model is loaded.
        from .._transport import Refused, open_socket
        if not args.address:
            return _fail(2, "serve needs --address (the window's engine socket)")
        try:
            sock = open_socket(args.address)
        except Refused as exc:
            return _fail(2, str(exc))
    # torch.export.load unpacks the archive into a temporary folder: a private one, removed at
    # exit, is the only place the confined process may write.
    # hookscope-cli checkpoint makes it and removes it after this process ends (a confined process
    # cannot remove its own folder); else made here and removed at exit where the confinement allows.
    scratch = os.environ.pop("HOOKSCOPE_ENGINE_SCRATCH", "") or tempfile.mkdtemp(prefix="hookscope-engine-")
    atexit.register(shutil.rmtree, scratch, True)
    os.environ["TMPDIR"] = scratch
    tempfile.tempdir = scratch
    confinement = "none (--no-confine)"
    if args.confine:
        from .confine import confine
        try:
            confinement = confine(scratch)
        except RuntimeError as exc:
            return _fail(3, "%s; run with --no-confine only for a model you trust" % exc)
    if args.command == "checkpoint":
        from .checkpoint import main as checkpoint
        return checkpoint(args.model, args.compare, csv=args.csv)
    try:
        with warnings.catch_warnings():  # PyTorch's own deprecations while it unpacks the file
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            loaded = load(args.model, trust=args.trust, python_path=args.python_path)
    except ModelFileError as exc:
        return _fail(exc.code, str(exc))
    if args.command == "inspect":
        from .inspect import inspect
        return inspect(loaded, args.model, args.input)
    from .server import EngineServer
    ended, clean = EngineServer(loaded, args.model, args.address, sock, confinement).serve()
    if not clean:
        return _fail(4, ended)
    return 0


if __name__ == "__main__":
    sys.exit(main())
