"""`pagedmla demo` end to end on CPU: exit 0 when every check passes, non-zero when one fails."""

from __future__ import annotations

import sys

import pytest
import torch

from pagedmla.model import demo


def test_layer_only_demo_passes(capsys):
    assert demo.main(["--layer-only", "--backend", "reference", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "check OK" in out and "shares 8 prefix tokens" in out


def test_model_demo_matches_transformers(capsys):
    pytest.importorskip("transformers")
    assert demo.main(["--backend", "reference", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "check OK: all 7 requests match" in out
    assert "steps verifying drafts" in out and "shared by prefix" in out and "tokens/s" in out


def test_model_demo_fails_on_wrong_tokens(monkeypatch, capsys):
    pytest.importorskip("transformers")
    from pagedmla.model.engine import Engine

    forward = Engine.forward

    def skewed(self, tokens, batch, rows):
        logits = forward(self, tokens, batch, rows)
        # Every request then emits token 3 forever: the check against transformers must catch it.
        logits[:, 3] += 1e4
        return logits

    monkeypatch.setattr(Engine, "forward", skewed)
    assert demo.main(["--backend", "reference", "--quiet"]) == 1
    assert "check FAILED" in capsys.readouterr().out


def test_demo_falls_back_to_layer_only_without_transformers(monkeypatch, capsys):
    # A None entry in sys.modules makes `import transformers` raise ImportError.
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert demo.main(["--backend", "reference", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "transformers is not installed" in out and "--layer-only" in out and "check OK" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_demo_rejects_missing_cuda(capsys):
    assert demo.main(["--device", "cuda", "--quiet"]) == 2
