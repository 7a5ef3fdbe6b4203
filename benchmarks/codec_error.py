"""Pixel error of LeRobot's video encoding: record the same seeded episodes losslessly (PNG) and as mp4 video, decode
both through LeRobotDataset, and compare. Prints mean absolute error (0-255 scale), PSNR, and writes JSON.

    python benchmarks/codec_error.py [--sim robosuite_lift] [--episodes 5]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from vla_wmrl.collect import collect
from vla_wmrl.config import ExpertConfig, SimConfig
from vla_wmrl.data import load_dataset


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sim", default="robosuite_lift")
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--crf", type=int, default=None, help="video constant rate factor (None: LeRobot default)")
    parser.add_argument("--out", default="benchmarks/results/codec_error.json")
    args = parser.parse_args()
    camera = "top" if args.sim == "mujoco_reach" else "agentview"
    sim = SimConfig(name=args.sim, cameras=[camera])
    with tempfile.TemporaryDirectory() as tmp:
        roots = {}
        for video in (False, True):
            roots[video] = Path(tmp) / ("video" if video else "png")
            collect(sim, ExpertConfig(), args.episodes, str(roots[video]), "local/codec", num_envs=1, video=video,
                    video_crf=args.crf)
        lossless, lossy = load_dataset(roots[False]), load_dataset(roots[True])
        key = f"observation.images.{camera}"
        errs = []
        for i in range(len(lossless)):
            a = lossless[i][key].numpy() * 255.0
            b = lossy[i][key].numpy() * 255.0
            errs.append(np.abs(a - b).mean())
            if i == 0:
                sq = [((a - b) ** 2).mean()]
            else:
                sq.append(((a - b) ** 2).mean())
    mae, mse = float(np.mean(errs)), float(np.mean(sq))
    psnr = float(10 * np.log10(255.0**2 / mse))
    result = {"sim": args.sim, "crf": args.crf, "frames": len(errs), "mean_abs_error_0_255": mae, "max_frame_mae": float(np.max(errs)),
              "psnr_db": psnr, "codec": lossy.meta.info["features"][key].get("info", {})}
    print(json.dumps(result, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
