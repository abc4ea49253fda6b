"""The local cluster's two "images" for a software A/B (``make local-assets``):
``python3 -m slurm_ab_testbed.make_images DIR`` writes DIR/sglang-0.5.23 and DIR/sglang-0.5.24.

Each is a directory read by ``fake_apptainer`` (the local stand-in for ``apptainer exec``): its
``image.toml`` [env] is what a step in it sees. 0.5.23 is the emulator as it is; 0.5.24 runs it
with ``costs.toml``'s decode step DECODE_REGRESSION slower (its own ``costs.toml`` override through
SLURM_AB_EMU_IMAGE_CONFIG, under a run's own SLURM_AB_EMU_CONFIG): a build that regresses, for the A/B to find. The images' own version labels
(SLURM_AB_IMAGE_VERSION) are what the campaign's page shows beside their paths.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .emulator.costs import load_costs

DECODE_REGRESSION = 1.10         # 0.5.24's decode step x this: -9 % output tok/s at the seed's workload

IMAGES = {
    "sglang-0.5.23": {"version": "0.5.23", "costs": None},
    "sglang-0.5.24": {"version": "0.5.24",
                      "costs": {"compute_ms_per_step": load_costs().decode.compute_ms_per_step * DECODE_REGRESSION}},
}


def write(root: Path) -> list[Path]:
    out = []
    for name, spec in IMAGES.items():
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        env = [f'SLURM_AB_IMAGE_VERSION = "{spec["version"]}"']
        if spec["costs"]:
            (d / "costs.toml").write_text("# this image's engine: costs.toml with these values\n[decode]\n"
                                          + "".join(f"{k} = {v}\n" for k, v in spec["costs"].items()))
            env.append('SLURM_AB_EMU_IMAGE_CONFIG = "{image}/costs.toml"')
        (d / "image.toml").write_text(f"# a testbed image (slurm_ab_testbed.make_images): SGLang {spec['version']}'s "
                                      "stand-in\n[env]\n" + "\n".join(env) + "\n")
        out.append(d)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    for d in write(Path(ap.parse_args().dir)):
        print(d)


if __name__ == "__main__":
    main()
