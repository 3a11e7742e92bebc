"""kiln.nn's MultiheadAttention and Transformer layers against torch 1.13's: torch's state_dict
loads by name, and outputs (with attention masks, key padding masks, batch_first, norm_first,
gelu) and gradients match in eval mode (dropout off)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kiln  # noqa: E402
import kiln.nn as nn  # noqa: E402


def kt(a, grad=False):
    t = kiln.tensor(np.array(a, order="C"))
    return t.requires_grad_() if grad else t


def copy_weights(tm, km):
    sd = tm.state_dict()
    assert list(km.state_dict()) == list(sd)
    km.load_state_dict({k: kt(v.detach().numpy()) for k, v in sd.items()})


def close(k, t, tol=2e-5):
    np.testing.assert_allclose(k.detach().numpy(), t.detach().numpy(), rtol=tol, atol=tol)


rng = np.random.default_rng(2)
L, S, N, E = 5, 7, 3, 8
Q = rng.standard_normal((L, N, E)).astype(np.float32)
KV = rng.standard_normal((S, N, E)).astype(np.float32)
CAUSAL = np.triu(np.ones((L, L), bool), 1)
PAD = np.zeros((N, S), bool)
PAD[0, -2:] = True
PAD[2, -1] = True


@pytest.mark.parametrize("kwargs", [{}, {"bias": False}, {"add_bias_kv": True},
                                    {"add_zero_attn": True}, {"kdim": 6, "vdim": 5}])
def test_multihead_attention_matches_torch(kwargs):
    torch.manual_seed(0)
    tm, km = torch.nn.MultiheadAttention(E, 2, **kwargs), nn.MultiheadAttention(E, 2, **kwargs)
    copy_weights(tm, km)
    kv_k = KV[..., :kwargs.get("kdim", E)]
    kv_v = KV[..., :kwargs.get("vdim", E)]
    tq = torch.tensor(Q, requires_grad=True)
    kq = kt(Q, True)
    to, tw = tm(tq, torch.tensor(kv_k), torch.tensor(kv_v), key_padding_mask=torch.tensor(PAD))
    ko, kw = km(kq, kt(kv_k), kt(kv_v), key_padding_mask=kt(PAD))
    close(ko, to)
    close(kw, tw)
    to.sum().backward()
    ko.sum().backward()
    close(kq.grad, tq.grad, 1e-4)
    kp = dict(km.named_parameters())
    for n, p in tm.named_parameters():
        close(kp[n].grad, p.grad, 1e-4)


def test_attention_masks_batch_first_and_per_head_weights():
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(E, 4, batch_first=True)
    km = nn.MultiheadAttention(E, 4, batch_first=True)
    copy_weights(tm, km)
    x = np.ascontiguousarray(Q.transpose(1, 0, 2))
    fmask = np.where(CAUSAL, -1e9, 0.0).astype(np.float32)
    for mask in (CAUSAL, fmask):
        to, tw = tm(*[torch.tensor(x)] * 3, attn_mask=torch.tensor(mask),
                    average_attn_weights=False)
        ko, kw = km(*[kt(x)] * 3, attn_mask=kt(mask), average_attn_weights=False)
        close(ko, to)
        close(kw, tw)
        assert tuple(kw.shape) == (N, 4, L, L)
    ko, kw = km(kt(x[0]), kt(x[0]), kt(x[0]), need_weights=False)   # unbatched
    to, _ = tm(torch.tensor(x[0]), torch.tensor(x[0]), torch.tensor(x[0]))
    assert kw is None
    close(ko, to)


@pytest.mark.parametrize("kwargs", [{}, {"norm_first": True}, {"activation": "gelu"},
                                    {"batch_first": True, "dim_feedforward": 16}])
def test_encoder_matches_torch(kwargs):
    torch.manual_seed(0)
    tl = torch.nn.TransformerEncoderLayer(E, 2, dropout=0.1, **kwargs)
    kl = nn.TransformerEncoderLayer(E, 2, dropout=0.1, **kwargs)
    tenc = torch.nn.TransformerEncoder(tl, 2, norm=torch.nn.LayerNorm(E))
    kenc = nn.TransformerEncoder(kl, 2, norm=nn.LayerNorm(E))
    copy_weights(tenc, kenc)
    tenc.eval(), kenc.eval()
    x = Q if not kwargs.get("batch_first") else np.ascontiguousarray(Q.transpose(1, 0, 2))
    pad = np.zeros((N, L), bool)
    pad[1, -2:] = True
    mask = torch.nn.Transformer.generate_square_subsequent_mask(L)
    kmask = nn.Transformer.generate_square_subsequent_mask(L)
    np.testing.assert_array_equal(kmask.numpy(), mask.numpy())
    tx, kx = torch.tensor(x, requires_grad=True), kt(x, True)
    to = tenc(tx, mask=mask, src_key_padding_mask=torch.tensor(pad))
    ko = kenc(kx, mask=kmask, src_key_padding_mask=kt(pad))
    close(ko, to, 1e-4)
    (to * to).sum().backward()
    (ko * ko).sum().backward()
    close(kx.grad, tx.grad, 1e-3)
    # The clones are independent copies.
    assert kenc.layers[0].linear1.weight is not kenc.layers[1].linear1.weight


def test_decoder_and_full_transformer_match_torch():
    torch.manual_seed(0)
    tm = torch.nn.Transformer(E, 2, 2, 2, 16, dropout=0.0)
    km = nn.Transformer(E, 2, 2, 2, 16, dropout=0.0)
    copy_weights(tm, km)
    tgt_mask = torch.nn.Transformer.generate_square_subsequent_mask(L)
    to = tm(torch.tensor(KV), torch.tensor(Q), tgt_mask=tgt_mask)
    ko = km(kt(KV), kt(Q), tgt_mask=kt(tgt_mask.numpy()))
    close(ko, to, 1e-4)
    assert len(list(km.parameters())) == len(list(tm.parameters()))


def test_encoder_layer_init_and_repr():
    km = nn.TransformerEncoderLayer(16, 4)
    w = km.self_attn.in_proj_weight.detach().numpy()
    bound = np.sqrt(6.0 / (16 + 48))   # xavier_uniform on [3E, E]
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert np.all(km.self_attn.in_proj_bias.detach().numpy() == 0)
    assert km.linear1.weight.shape == (2048, 16)
