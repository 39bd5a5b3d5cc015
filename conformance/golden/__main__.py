"""python -m conformance.golden: rewrite the generated golden files from openapi.yaml."""
from conformance.golden.generate import write

for path in write():
    print(path)
