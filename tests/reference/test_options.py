"""The reference's numeric options are checked at start too, before vLLM starts."""

from __future__ import annotations

import pytest

from reference_impl.__main__ import main


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--budget-tokens", "-3"], "--budget-tokens must be >= 0, got -3"),
        (["--port", "99999"], "argument --port: must be between 0 and 65535, got 99999"),
        (["--workers", "0"], "argument --workers: must be >= 1, got 0"),
    ],
)
def test_an_option_out_of_range_is_refused_naming_it(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--upstream", "http://127.0.0.1:9", *argv])
    assert info.value.code == 2
    assert (
        capsys.readouterr().err.strip().splitlines()[-1]
        == f"python -m reference_impl: error: {message}"
    )
