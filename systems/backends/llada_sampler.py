"""LLaDA's masked-diffusion generation algorithm over any bidirectional logits function.

The sampler is model-agnostic: it needs a callable `logits_fn(x, attention_mask) -> logits` that runs one
bidirectional pass over a batch of token ids (shape (b, L)) and returns logits (b, L, V). The same code
drives LLaDA-8B (systems/backends/llada_hf.py) and the embedded masked-diffusion LM (systems/backends/mdlm),
so what the small model shows about the algorithm carries over to the real one.

Algorithm (Nie et al. 2025, "Large Language Diffusion Models", reverse process with semi-AR remasking):
the response region starts fully masked; it is split into blocks decoded left to right; within a block,
each of the block's steps predicts every masked token, then commits a scheduled number of them (the
`low_confidence` ones with highest predicted probability, or `random` ones) and leaves the rest masked.
Gumbel-max sampling with temperature is done in float64 because low-precision Gumbel noise measurably
hurts generation quality. Classifier-free guidance runs a second, unconditional pass with the prompt
masked and mixes `un + (cfg + 1) * (cond - un)`.

The predicted token x0 is the argmax over the whole vocabulary, the mask included, and its confidence is
its probability under the unmodified softmax, exactly as in the authors' `generate()`; a transfer slot
that goes to a position predicting the mask leaves that position masked, as there. The one departure:
the reference can end a block (and the response) with masks left over; here the block's last step
commits every position still masked, each predicted mask replaced by its best non-mask token, so the
output never contains the mask. Whenever the reference's output contains no mask, the two agree token
for token (tests/test_llada_sampler.py checks this against an independent reference implementation).

Fast decoding in the spirit of Fast-dLLM (Wu et al. 2025): with `threshold` set, each step commits every
masked token of the current block whose confidence exceeds the threshold (at least one), so easy spans
are committed in parallel and the number of forward passes (NFE) drops. `prefix_cache` lets a model
that supports it reuse the keys/values of everything left of the current block for the block's steps.

Randomness in the commit order (MaskGIT, Chang et al. 2022; opt-in, `choice_temperature`): the
low-confidence ranking gets annealed Gumbel noise, so records need not all commit the same most
confident token first; 0, the default, draws nothing and leaves every output as above.

Constrained decoding: `choose_x0` replaces the per-position argmax by a joint choice, such as the best
canvas a JSON Schema's token automaton accepts (systems/backends/schema_dfa.py, DINGO-style); confidences
stay the model's probabilities of the chosen tokens and no extra noise is drawn.

Every forward pass is counted in `SamplerOutput.nfe` (a CFG step counts two passes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch

from bench.deadline import check as check_deadline

Remasking = Literal["low_confidence", "random"]

#: Bump when the sampler's output for the same inputs changes; backends put it in their identity().
#: 2: confidence from the unmodified softmax (the mask logit is no longer set to -inf first).
SAMPLER_VERSION = 2


class LogitsFn(Protocol):
    """One bidirectional forward pass: ids (b, L) and key-padding mask (b, L; True = attend) -> logits."""

    def __call__(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor: ...


class PrefixCachedModel(Protocol):
    """A model that can split a pass into a cached prefix and an active suffix (Fast-dLLM prefix cache).

    `forward_with_cache(x, mask, s)` runs one full pass and returns (logits, cache of positions < s);
    `forward_suffix(cache, x[:, s:], mask)` returns logits for positions s.. attending to the cached
    prefix and to the whole suffix (the prefix's keys/values are not refreshed: an approximation).
    """

    def forward_with_cache(
        self, x: torch.Tensor, attention_mask: torch.Tensor | None, prefix_length: int
    ) -> tuple[torch.Tensor, object]: ...

    def forward_suffix(
        self, cache: object, x: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> torch.Tensor: ...


# A hook that edits the logits before sampling, e.g. value-level constraints of the skeleton system:
# (logits (b, L, V) float64, x (b, L)) -> logits.
LogitsHook = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# A replacement for the per-position argmax x0 of one row and block, e.g. the schema automaton's Viterbi
# path (systems/backends/schema_dfa.py): (canvas row (L,), block start, block end, the block's log-domain
# sampling scores (n, V) float64, the row's logits (L, V), the unconstrained argmax (n,)) -> x0 (n,).
X0Chooser = Callable[[torch.Tensor, int, int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class SamplerConfig:
    """Every knob of the reverse process; all of them change the output and belong in cache keys."""

    steps: int = 12
    """Total denoising steps T over the whole response (the paper runs LLaDA-8B at T = 12)."""
    gen_length: int = 128
    """Number of response positions (masked at the start) for `generate`; ignored by `denoise`."""
    block_length: int | None = None
    """Semi-autoregressive block size; None = one block spanning the response."""
    remasking: Remasking = "low_confidence"
    """Which predicted tokens are committed: highest confidence first, or uniformly random ones."""
    temperature: float = 0.0
    """Gumbel-noise temperature; 0 = greedy argmax."""
    cfg_scale: float = 0.0
    """Classifier-free guidance scale; 0 disables the unconditional pass (paper: CFG off)."""
    threshold: float | None = None
    """Fast-dLLM parallel commit: commit every masked token of the block above this confidence.

    A step in which no selected position would change (all predict the mask) commits the most
    confident position with its best non-mask token instead, so every step makes progress."""
    prefix_cache: bool = False
    """Reuse prefix keys/values across a block's steps (needs a PrefixCachedModel)."""
    choice_temperature: float = 0.0
    """MaskGIT's randomness in which positions a low-confidence step commits (Chang et al. 2022): each
    masked position competes with log(confidence) + tau_s * g, g ~ Gumbel(0, 1), tau_s = this value times
    1 - (s + 1) / S at step s of a block's S steps, so the noise is largest at the first step and gone at
    the last. 0 (the default) is LLaDA's deterministic top-k and draws no extra noise."""

    def to_json(self) -> dict[str, object]:
        # choice_temperature enters only when set, so every key written before it existed stays valid
        extra = {"choice_temperature": self.choice_temperature} if self.choice_temperature else {}
        return {
            **extra,
            "steps": self.steps,
            "gen_length": self.gen_length,
            "block_length": self.block_length,
            "remasking": self.remasking,
            "temperature": self.temperature,
            "cfg_scale": self.cfg_scale,
            "threshold": self.threshold,
            "prefix_cache": self.prefix_cache,
        }


#: The knobs a request may set through SamplingParams.extra (every diffusion backend accepts these).
SAMPLER_KEYS = (
    "steps",
    "gen_length",
    "block_length",
    "remasking",
    "temperature",
    "cfg_scale",
    "threshold",
    "prefix_cache",
    "choice_temperature",
)


def merge_knobs(
    defaults: dict[str, Any], overrides: dict[str, Any], ignored: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A backend's default knobs with a request's overrides; an unknown knob is a user error.

    `ignored` names knobs a backend accepts but cannot honour (they leave the defaults unchanged)."""
    from bench.errors import BenchError

    merged = dict(defaults)
    for k, v in overrides.items():
        if k not in SAMPLER_KEYS:
            raise BenchError(f"unknown diffusion knob {k!r}; known: {', '.join(SAMPLER_KEYS)}")
        if k not in ignored:
            merged[k] = v
    return merged


def checked(config: SamplerConfig, response_length: int) -> SamplerConfig:
    """Reject knob combinations the reverse process cannot run, as a user error (BenchError)."""
    from bench.errors import BenchError

    blocks = math.ceil(response_length / config.block_length) if config.block_length else 1
    if config.steps < blocks:
        raise BenchError(
            f"diffusion steps ({config.steps}) must be >= the number of blocks ({blocks} blocks of "
            f"{config.block_length} over {response_length} response tokens)"
        )
    if config.remasking not in ("low_confidence", "random"):
        raise BenchError(f"unknown remasking {config.remasking!r}")
    if config.choice_temperature < 0:
        raise BenchError(f"choice_temperature must be >= 0, got {config.choice_temperature}")
    if config.choice_temperature and (config.remasking != "low_confidence" or config.threshold is not None):
        raise BenchError(
            "choice_temperature perturbs the scheduled low-confidence choice: it needs remasking "
            "low_confidence and no threshold"
        )
    return config


@dataclass
class SamplerOutput:
    """Final canvas plus accounting: NFE, steps actually run, and per-step commit counts (for tests)."""

    x: torch.Tensor
    nfe: int
    steps_run: int
    commits: list[torch.Tensor] = field(default_factory=list)  # per step: (b,) tokens committed
    row_nfe: torch.Tensor | None = None  # (b,) passes in which each row still had masks


def add_gumbel_noise(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> torch.Tensor:
    """Gumbel-max perturbation in float64: argmax(exp(l) / (-log u)^T) samples softmax(l / T).

    Written as exp(l) / (-log u)^T like LLaDA's reference formulation; float64 keeps the noise from
    collapsing for large logits (float16/32 Gumbel noise lowers quality, LLaDA appendix).
    """
    if temperature == 0:
        return logits.to(torch.float64)
    logits = logits.to(torch.float64)
    u = torch.rand(logits.shape, generator=generator, dtype=torch.float64, device=logits.device)
    u = u.clamp_min(1e-300)
    gumbel = (-torch.log(u)) ** temperature
    # subtract the row max before exp: same argmax, no overflow
    return torch.exp(logits - logits.amax(dim=-1, keepdim=True)) / gumbel


def choice_noised(conf: torch.Tensor, tau: float, generator: torch.Generator) -> torch.Tensor:
    """MaskGIT's noised commit scores: log(conf) + tau * Gumbel(0, 1) (masked-out -inf entries stay -inf).

    The Gumbel draw is -log(-log u) in float64 from the row's own generator, after that step's token
    noise, so a row's stream still does not depend on its batch."""
    u = torch.rand(conf.shape, generator=generator, dtype=torch.float64, device=conf.device).clamp(
        1e-300, 1.0
    )
    noised = conf.clamp_min(1e-300).log() + tau * -torch.log(-torch.log(u))
    return torch.where(torch.isneginf(conf), conf, noised)


def num_transfer_tokens(mask_count: torch.Tensor, steps: int) -> torch.Tensor:
    """Tokens to commit at each of `steps` steps: an even split, remainder to the earliest steps.

    mask_count: (b,) masked tokens in the block. Returns (b, steps) ints summing to mask_count.
    """
    base = mask_count // steps
    rem = mask_count % steps
    out = base.unsqueeze(1).repeat(1, steps)
    idx = torch.arange(steps, device=mask_count.device).unsqueeze(0)
    return out + (idx < rem.unsqueeze(1)).long()


def split_steps(steps: int, num_blocks: int) -> list[int]:
    """Distribute T steps over blocks (LLaDA asserts divisibility; we spread the remainder instead)."""
    if steps < num_blocks:
        raise ValueError(f"steps ({steps}) must be >= number of blocks ({num_blocks})")
    return [steps // num_blocks + (1 if i < steps % num_blocks else 0) for i in range(num_blocks)]


def _forward(
    model: LogitsFn,
    x: torch.Tensor,
    attention_mask: torch.Tensor | None,
    prompt_index: torch.Tensor,
    mask_id: int,
    cfg_scale: float,
) -> tuple[torch.Tensor, int]:
    """One denoising prediction; returns logits (model dtype) and the number of forward passes used.

    Logits stay in the model's dtype here (a float64 copy of (b, L, V) would not fit for LLaDA-8B's
    126k vocabulary); the sampler converts the current block's slice to float64 before sampling.
    """
    if cfg_scale > 0:
        un_x = x.clone()
        un_x[prompt_index] = mask_id
        am = None if attention_mask is None else torch.cat([attention_mask, attention_mask])
        both = model(torch.cat([x, un_x]), am)
        cond, un = both.chunk(2, dim=0)
        return un + (cfg_scale + 1.0) * (cond - un), 2
    return model(x, attention_mask), 1


def _without_mask(pred: torch.Tensor, noised: torch.Tensor, sel: torch.Tensor, mask_id: int) -> torch.Tensor:
    """`pred` with every selected position that predicts the mask set to its best non-mask token.

    The best non-mask token is the argmax of the same (noised) scores with the mask excluded, so no new
    noise is drawn and the row's random stream is the same as the reference's.
    """
    hit = sel[pred[sel] == mask_id]
    if hit.numel() == 0:
        return pred
    pred = pred.clone()
    pred[hit] = (
        noised[hit].index_fill(-1, torch.tensor([mask_id], device=noised.device), -math.inf).argmax(-1)
    )
    return pred


def denoise(
    model: LogitsFn,
    canvas: torch.Tensor,
    prompt_length: int,
    mask_id: int,
    config: SamplerConfig,
    seed: int | Sequence[int],
    attention_mask: torch.Tensor | None = None,
    logits_hook: LogitsHook | None = None,
    cached_model: PrefixCachedModel | None = None,
    record_commits: bool = False,
    choose_x0: X0Chooser | None = None,
) -> SamplerOutput:
    """Unmask every `mask_id` position of `canvas` right of `prompt_length` with LLaDA's reverse process.

    `canvas` (b, L) may already hold fixed tokens in the response region (skeleton infilling): only masked
    positions are predicted and counted in the schedule. Blocks cover positions prompt_length..L-1.
    `seed` is one seed per row (an int seeds row j with seed + j). Each row draws its noise from its own
    generator and only while it still has masks in the current block, so a row's output does not depend
    on which other rows share its batch (the call cache relies on that).
    `choose_x0` replaces the per-position argmax x0 (constrained decoding); confidences stay the model's
    probabilities of the chosen tokens, and no extra noise is drawn, so None leaves the output exact.
    """
    if config.steps < 1:
        raise ValueError("steps must be >= 1")
    x = canvas.clone()
    b, total = x.shape
    seeds = [int(seed) + j for j in range(b)] if isinstance(seed, int) else [int(s) for s in seed]
    if len(seeds) != b:
        raise ValueError(f"{len(seeds)} seeds for a batch of {b}")
    gens: list[torch.Generator] = []  # created on the logits' device at the first pass
    gen_length = total - prompt_length
    block_length = config.block_length or gen_length
    num_blocks = max(1, math.ceil(gen_length / block_length))
    block_steps = split_steps(config.steps, num_blocks)
    prompt_index = torch.zeros_like(x, dtype=torch.bool)
    prompt_index[:, :prompt_length] = True
    nfe = 0
    row_nfe = torch.zeros(b, dtype=torch.long)
    steps_run = 0
    commits: list[torch.Tensor] = []
    use_cache = config.prefix_cache and cached_model is not None and config.cfg_scale == 0
    for nb in range(num_blocks):
        check_deadline()  # the agent loop's per-item deadline (bench.deadline): raises once passed
        start = prompt_length + nb * block_length
        end = min(prompt_length + (nb + 1) * block_length, total)
        block_masked = x[:, start:end] == mask_id
        if not bool(block_masked.any()):
            continue
        n_steps = block_steps[nb]
        schedule = num_transfer_tokens(block_masked.sum(dim=1), n_steps)
        cache = None
        step = 0
        while bool((x[:, start:end] == mask_id).any()):
            remaining = (x[:, start:end] == mask_id).sum(dim=1)
            if use_cache and cache is not None:
                suffix = cached_model.forward_suffix(cache, x[:, start:], attention_mask)  # type: ignore[union-attr]
                logits = torch.zeros((b, total, suffix.shape[-1]), dtype=suffix.dtype, device=suffix.device)
                logits[:, start:] = suffix
                used = 1
            elif use_cache:
                # Fast-dLLM prefix cache: one full pass at the block start; its prefix keys/values are
                # reused by the block's later steps
                logits, cache = cached_model.forward_with_cache(x, attention_mask, start)  # type: ignore[union-attr]
                used = 1
            else:
                logits, used = _forward(model, x, attention_mask, prompt_index, mask_id, config.cfg_scale)
            nfe += used
            row_nfe += (remaining > 0).long() * used
            if logits_hook is not None:
                logits = logits_hook(logits, x)
            if not gens:
                gens = [torch.Generator(device=logits.device).manual_seed(s) for s in seeds]
            transfer = torch.zeros_like(x, dtype=torch.bool)
            x0 = x.clone()
            for j in range(b):
                if remaining[j] == 0:
                    continue
                lj = logits[j, start:end].to(torch.float64)
                noised = add_gumbel_noise(lj, config.temperature, gens[j])
                # as in the reference: x0 is the argmax over the whole vocabulary (the mask included) and
                # its confidence comes from the unmodified softmax
                pred = noised.argmax(dim=-1)
                if choose_x0 is not None:
                    # log-domain scores: noised is exp(l - max) / gumbel when T > 0, the logits when T = 0
                    scores = noised.log() if config.temperature > 0 else noised
                    pred = choose_x0(x[j], start, end, scores, logits[j], pred)
                if config.remasking == "low_confidence":
                    conf = torch.softmax(lj, dim=-1).gather(-1, pred.unsqueeze(-1)).squeeze(-1)
                elif config.remasking == "random":
                    conf = torch.rand(pred.shape, generator=gens[j], dtype=torch.float64, device=lj.device)
                else:
                    raise ValueError(f"unknown remasking {config.remasking!r}")
                masked = (x[j, start:end] == mask_id).to(lj.device)
                # only masked positions of the current block compete; nothing outside it is committed
                conf = torch.where(masked, conf, torch.full_like(conf, -math.inf))
                real = pred != mask_id  # a slot given to a predicted mask leaves its position masked
                if config.threshold is not None:
                    sel = ((conf > config.threshold) & masked).nonzero().squeeze(-1)
                    if sel.numel() == 0:
                        sel = conf.argmax().view(1)
                    if not bool(real[sel].any()):
                        # no position would change: commit the most confident one with its best
                        # non-mask token, so every step makes progress (the one departure, see docs)
                        sel = conf.argmax().view(1)
                        pred = _without_mask(pred, noised, sel, mask_id)
                else:
                    last = step >= n_steps - 1
                    if last:
                        # the block's last step: the reference commits schedule[last] tokens and may
                        # leave masks behind (when it gave a slot to a predicted mask); we commit every
                        # remaining position, each predicted mask replaced by its best non-mask token
                        sel = masked.nonzero().squeeze(-1)
                        pred = _without_mask(pred, noised, sel, mask_id)
                    else:
                        k = int(schedule[j, step])
                        if k == 0:
                            continue
                        if config.choice_temperature:
                            conf = choice_noised(
                                conf, config.choice_temperature * (1 - (step + 1) / n_steps), gens[j]
                            )
                        sel = torch.topk(conf, k=k).indices
                sel = sel[pred[sel] != mask_id]
                transfer[j, start + sel.to(x.device)] = True
                x0[j, start:end] = pred.to(x.device)
            x[transfer] = x0[transfer]
            if record_commits:
                commits.append(transfer.sum(dim=1))
            step += 1
            steps_run += 1
    return SamplerOutput(x=x, nfe=nfe, steps_run=steps_run, commits=commits, row_nfe=row_nfe)


def left_pad(
    prompts: Sequence[Sequence[int]],
    pad_id: int,
    device: str | torch.device = "cpu",
    width: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch prompts of different lengths: left-pad so every response starts at the same column.

    `width` fixes the padded width (models with absolute positions need the response at a fixed column);
    default: the longest prompt. Returns ids (b, P) and the key-padding mask (True = real token).
    """
    width = max(max(len(p) for p in prompts), width or 0)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(prompts), width), dtype=torch.bool, device=device)
    for i, p in enumerate(prompts):
        if len(p):
            ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            mask[i, width - len(p) :] = True
    return ids, mask


def generate(
    model: LogitsFn,
    prompts: Sequence[Sequence[int]],
    mask_id: int,
    pad_id: int,
    config: SamplerConfig,
    seed: int | Sequence[int],
    cached_model: PrefixCachedModel | None = None,
    logits_hook: LogitsHook | None = None,
    choose_x0: X0Chooser | None = None,
) -> SamplerOutput:
    """Generate `config.gen_length` tokens after each prompt (batched with left padding)."""
    ids, pmask = left_pad(prompts, pad_id)
    b, p = ids.shape
    canvas = torch.cat([ids, torch.full((b, config.gen_length), mask_id, dtype=torch.long)], dim=1)
    attn = torch.cat([pmask, torch.ones((b, config.gen_length), dtype=torch.bool)], dim=1)
    attention_mask = None if bool(attn.all()) else attn
    return denoise(
        model,
        canvas,
        p,
        mask_id,
        config,
        seed,
        attention_mask=attention_mask,
        logits_hook=logits_hook,
        cached_model=cached_model,
        choose_x0=choose_x0,
    )


def cut_at_eos(tokens: Sequence[int], eos_ids: Sequence[int]) -> tuple[list[int], bool]:
    """Response tokens up to the first EOS/EoT; the flag says whether one was found (finish 'stop')."""
    stops = set(eos_ids)
    for i, t in enumerate(tokens):
        if t in stops:
            return list(tokens[:i]), True
    return list(tokens), False


def mc_nll_bound(
    model: LogitsFn,
    prompt: Sequence[int],
    response: Sequence[int],
    mask_id: int,
    n_mc: int,
    seed: int,
    batch_size: int = 16,
    pad_id: int | None = None,
) -> tuple[float, int]:
    """Monte Carlo upper bound on -log p(response | prompt) (LLaDA, Eq. for conditional likelihood).

    -log p(r|p) <= E_{l ~ U{1..L}} [ (L / l) * sum_{i masked} -log p(r_i | p, r_masked) ], where l of the L
    response tokens are masked uniformly at random. The estimate is a *bound*, not an exact NLL; callers
    must label perplexities derived from it as such. Prompt tokens equal to `pad_id` are masked out of
    attention. Returns (estimated bound in nats, L).
    """
    L = len(response)
    if L == 0:
        return 0.0, 0
    gen = torch.Generator().manual_seed(int(seed))
    p_ids = torch.tensor(list(prompt), dtype=torch.long)
    r_ids = torch.tensor(list(response), dtype=torch.long)
    seq = torch.cat([p_ids, r_ids])
    estimates: list[float] = []
    draws: list[tuple[torch.Tensor, int]] = []
    for _ in range(n_mc):
        ell = int(torch.randint(1, L + 1, (1,), generator=gen))
        perm = torch.randperm(L, generator=gen)[:ell]
        m = torch.zeros(L, dtype=torch.bool)
        m[perm] = True
        draws.append((m, ell))
    for i in range(0, n_mc, batch_size):
        chunk = draws[i : i + batch_size]
        xs = seq.unsqueeze(0).repeat(len(chunk), 1)
        for j, (m, _) in enumerate(chunk):
            xs[j, len(p_ids) :][m] = mask_id
        am = None
        if pad_id is not None and bool((p_ids == pad_id).any()):
            am = torch.ones_like(xs, dtype=torch.bool)
            am[:, : len(p_ids)] = p_ids != pad_id
        with torch.no_grad():
            logits = model(xs, am)[:, len(p_ids) :]
            logp = torch.log_softmax(logits.to(torch.float64), dim=-1).cpu()
        for j, (m, ell) in enumerate(chunk):
            lp = logp[j].gather(-1, r_ids.unsqueeze(-1)).squeeze(-1)
            estimates.append(float(-(lp[m]).sum()) * L / ell)
    return sum(estimates) / len(estimates), L
