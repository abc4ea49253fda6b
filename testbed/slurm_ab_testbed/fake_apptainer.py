"""A stand-in for ``apptainer exec`` on the local cluster, which has no container runtime.

``python3 -m slurm_ab_testbed.fake_apptainer exec [--bind SRC:DST[,...]] IMAGE COMMAND [ARGS...]``

Real sites run a step in an image with pyxis (srun --container-image) or Apptainer
(``apptainer exec --bind ... IMAGE CMD``); slurm-ab's ``container.runtime = "exec"`` drives the
latter. Neither can be installed here (no enroot, pyxis or Apptainer in the package registries this
machine reaches), so an "image" is a directory: ``image.toml`` says what the image holds as
environment variables (its ``[env]``; ``{image}`` in a value is the image's directory), and this
program execs COMMAND with them, as apptainer execs it inside the image. What it stands for: a
step runs another build of the software (``testbed/sites/local.toml``'s images: the emulator with
another cost model, for "does 0.5.24 regress against 0.5.23?"). What it does not: isolate the file
system. Like apptainer it refuses a missing image and a bind source that does not exist, and says
which image it ran (``SLURM_AB_IMAGE`` in the command's environment; an ``INFO:`` line on stderr,
so every step's log names its image).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

IMAGE_FILE = "image.toml"


def image_env(image: Path) -> dict[str, str]:
    """The environment an image sets (its image.toml's [env], {image} replaced)."""
    data = tomllib.loads((image / IMAGE_FILE).read_text())
    return {k: str(v).replace("{image}", str(image)) for k, v in (data.get("env") or {}).items()}


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "exec":
        print("usage: fake_apptainer exec [--bind SRC:DST[,...]] IMAGE COMMAND [ARGS...]", file=sys.stderr)
        return 255
    args = argv[1:]
    binds: list[str] = []
    while args and args[0].startswith("-"):
        opt = args.pop(0)
        if opt in ("--bind", "-B") and args:
            binds += [b for b in args.pop(0).split(",") if b]
        elif opt.startswith("--bind="):
            binds += [b for b in opt.split("=", 1)[1].split(",") if b]
        else:
            print(f"FATAL:   unknown option {opt}", file=sys.stderr)
            return 255
    if len(args) < 2:
        print("FATAL:   an image and a command are required", file=sys.stderr)
        return 255
    image, command = Path(args[0]), args[1:]
    if not (image / IMAGE_FILE).is_file():
        print(f"FATAL:   could not open image {image}: no {IMAGE_FILE} (not an image of the testbed)", file=sys.stderr)
        return 255
    for b in binds:
        src = b.split(":", 1)[0]
        if not os.path.exists(src):
            print(f"FATAL:   container creation failed: mount hook function failure: mount {src}->"
                  f"{b.split(':')[1] if ':' in b else src} error: while mounting {src}: mount source {src} "
                  "doesn't exist", file=sys.stderr)
            return 255
    env = {**os.environ, **image_env(image), "SLURM_AB_IMAGE": str(image)}
    # one line on stderr (the step's log), as apptainer's own INFO lines: which image ran the step
    print(f"INFO:    fake_apptainer: {command[0]} ... in image {image} ({env.get('SLURM_AB_IMAGE_VERSION', '?')})",
          file=sys.stderr, flush=True)
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        print(f"FATAL:   \"{command[0]}\": executable file not found in $PATH ({e.strerror})", file=sys.stderr)
        return 255


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
