"""A worker with one job: rotate 3-D points about the z axis.

Serve it (next to the README quick start; ``$T`` is a token)::

    taskhub worker examples.rotate:Rotate --url http://127.0.0.1:8000 --token $T --room lab

Submit a task from Python (``python -m examples.rotate --token $T`` does much the same,
with two points)::

    from taskhub.sdk import Client
    from examples.rotate import Rotate

    with Client("http://127.0.0.1:8000", token) as hub:
        print(hub.submit(Rotate(angle=90, points=[[1, 0, 0]]), room="lab").result(timeout=30))
"""

from __future__ import annotations

import argparse
import math
import os

from pydantic import Field

from taskhub.sdk import Client, Extension, TaskContext


class Rotate(Extension):
    """Rotate points by ``angle`` degrees about the z axis."""

    category = "modifiers"

    angle: float = Field(90.0, description="degrees, counter-clockwise")
    points: list[tuple[float, float, float]] = [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0)]

    def run(self, ctx: TaskContext) -> dict[str, list[list[float]]]:
        turn = math.radians(self.angle)
        cos, sin = math.cos(turn), math.sin(turn)
        rotated = []
        for index, (x, y, z) in enumerate(self.points, start=1):
            if ctx.cancelled:  # cooperative cancel: stop early, the outcome is dropped
                break
            rotated.append([round(x * cos - y * sin, 12), round(x * sin + y * cos, 12), z])
            ctx.progress(index / len(self.points), f"{index}/{len(self.points)} points")
        return {"points": rotated}


def main() -> None:
    parser = argparse.ArgumentParser(description="Submit one Rotate task and print its result.")
    parser.add_argument("--url", default=os.environ.get("TASKHUB_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("TASKHUB_TOKEN"), required=False)
    parser.add_argument("--room", default="lab")
    parser.add_argument("--angle", type=float, default=90.0)
    args = parser.parse_args()
    if not args.token:
        parser.error("a token is required (--token or TASKHUB_TOKEN)")
    with Client(args.url, args.token) as hub:
        task = hub.submit(Rotate(angle=args.angle), room=args.room)
        print(f"submitted {task.id}; waiting …")
        print(task.result(timeout=60))


if __name__ == "__main__":
    main()
