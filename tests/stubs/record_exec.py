#!/usr/bin/env python3
"""Recording stub: ``record_exec.py OUTDIR CMD [ARG...]``.

Writes what it was started with -- argv (CMD and its arguments, exactly as received), the
environment, the Slurm node and the working directory -- as one JSON file into OUTDIR, then execs
CMD with the same arguments and environment (same pid: the job still sees and stops the real
program). Used as the first words of commands.server/router/client to prove that every value
reaches the process as one literal argument.
"""
import json
import os
import sys
import tempfile


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: record_exec.py OUTDIR CMD [ARG...]")
    outdir, cmd = sys.argv[1], sys.argv[2:]
    os.makedirs(outdir, exist_ok=True)
    record = {"argv": cmd, "env": dict(os.environ), "node": os.environ.get("SLURMD_NODENAME"),
              "cwd": os.getcwd(), "pid": os.getpid()}
    name = f"{os.environ.get('SLURMD_NODENAME', 'local')}-{os.getpid()}.json"
    fd, tmp = tempfile.mkstemp(dir=outdir, prefix=".rec-")
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(outdir, name))
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
