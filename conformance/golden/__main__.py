"""python -m conformance.golden: rewrite the generated golden files from openapi.yaml.

python -m conformance.golden record --base-url URL [--api-key KEY] [--name NAME]:
record the success-body shapes of the parity corpus from a deployment
(conformance/golden/record.py) into conformance/golden/recorded/NAME.json.
"""

import argparse
import os
import sys

import httpx

from conformance.golden import record
from conformance.golden.generate import write


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.golden")
    commands = parser.add_subparsers(dest="command")
    rec = commands.add_parser(
        "record", help="record the parity corpus's answer shapes from a deployment"
    )
    rec.add_argument("--base-url", required=True, help="the deployment's base URL, without /v1")
    rec.add_argument("--api-key", default=os.environ.get("CONFORMANCE_API_KEY", "any"))
    rec.add_argument("--model", default=None, help="the model (default: the spec's first)")
    rec.add_argument(
        "--name", default="reference-vllm-cpu", help="the recording's file name, without .json"
    )
    rec.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    if args.command != "record":
        for path in write():
            print(path)
        return 0
    headers = {"Authorization": f"Bearer {args.api_key}"}
    with httpx.Client(
        base_url=args.base_url.rstrip("/"), headers=headers, timeout=args.timeout
    ) as client:
        recording = record.record(client, args.model)
    print(record.write(recording, args.name))
    return 0


sys.exit(main(sys.argv[1:]))
