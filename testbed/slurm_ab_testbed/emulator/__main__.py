"""``python3 -m slurm_ab_testbed.emulator [SGLang launch_server flags]``: run one emulated SGLang node."""
from __future__ import annotations

import sys

from .cli_args import ServerArgsError, parse
from .costs import CostConfigError, load_costs
from .knobs import KnobError, read_knobs


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        knobs = read_knobs()
        costs = load_costs(knobs.config_path)
    except (KnobError, CostConfigError, OSError, ValueError) as e:
        print(f"slurm_ab_testbed.emulator: {e}", file=sys.stderr)
        return 2
    try:
        resolved = parse(argv, knobs.gpus_per_node)   # argparse errors exit 2, like SGLang
    except ServerArgsError as e:
        # SGLang raises ValueError from ServerArgs.__post_init__: a traceback and status 1.
        print("Traceback (most recent call last):\n"
              '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/server_args.py", line 701, in __post_init__\n'
              "    self._handle_speculative_decoding()\n"
              f"{e.exc_type}: {e}", file=sys.stderr)
        return 1
    from .node import Node  # after parsing: --help and flag errors stay fast
    return Node(resolved.args, resolved.warnings, knobs, costs).run()


if __name__ == "__main__":
    sys.exit(main())
