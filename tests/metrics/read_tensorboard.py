"""Prints the scalars of a TensorBoard event file (or a folder of them) as JSON,
{tag: [[step, value], ...]}, read by TensorBoard's own EventAccumulator: the C++ test of our
event writer checks that TensorBoard itself, not our reading of the format, sees what we wrote."""
import argparse
import json
import sys

from tensorboard.backend.event_processing import event_accumulator


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", help="an events.out.tfevents.* file or the folder holding it")
    args = parser.parse_args()
    # size_guidance 0 keeps every event; the default samples scalars down to 10,000.
    acc = event_accumulator.EventAccumulator(args.path, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    scalars = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    json.dump(scalars, sys.stdout)
    print()


if __name__ == "__main__":
    main()
