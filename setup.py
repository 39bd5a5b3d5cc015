"""The one build step pyproject.toml cannot say: put openapi.yaml inside the package.

The top-level openapi.yaml stays the one file people edit; building copies it to
contract/openapi.yaml in the wheel, where contract.spec reads it through
importlib.resources. A checkout (and an editable install, which maps contract/
to the source directory) reads the top-level file instead.
tests/house/test_packaging.py fails if the wheel's copy and the top-level file differ.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SPEC = "openapi.yaml"
PACKAGED_AS = ("contract", "openapi.yaml")


class BuildPyWithSpec(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib, *PACKAGED_AS)
        target.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(SPEC, str(target))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib, *PACKAGED_AS))]


setup(cmdclass={"build_py": BuildPyWithSpec})
