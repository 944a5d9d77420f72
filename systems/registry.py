"""Built-in systems and backends, registered lazily by "module:attr" (importing this is cheap)."""

from bench.registry import BACKENDS, SYSTEMS

# ---- systems: name -> class taking (params: dict) and implementing bench.types.System
SYSTEMS.register(
    "ar", "systems.ar:ARSystem", summary="direct AR generation: instruction + schema + k few-shot references"
)
SYSTEMS.register(
    "ar-grammar",
    "systems.ar_grammar:ARGrammarSystem",
    summary="ours: AR decoding constrained by a grammar compiled from the JSON Schema",
)
SYSTEMS.register(
    "llada",
    "systems.llada:LLaDASystem",
    summary="frozen masked-diffusion LM, LLaDA sampling, natural-language prompt",
)
SYSTEMS.register(
    "llada-grammar",
    "systems.llada:LLaDAGrammarSystem",
    summary="ours: llada decoding under the schema's token automaton (DINGO-style Viterbi x0)",
)
SYSTEMS.register(
    "llada-skeleton",
    "systems.llada:LLaDASkeletonSystem",
    summary="ours: the DLM fills only the value slots of the schema's JSON skeleton",
)
SYSTEMS.register(
    "diffusion-lm",
    "systems.diffusion_lm:DiffusionLMSystem",
    summary="Diffusion-LM (Li et al. 2022): continuous diffusion over learned embeddings, trained per task",
)
SYSTEMS.register(
    "difflm",
    "systems.difflm:DiffLMSystem",
    summary="DiffLM (Zhou et al. 2024): VAE + EDM latent diffusion + frozen LM decoder, resampled until valid",
)
SYSTEMS.register("file", "systems.file:FileSystem", summary="reads generations produced elsewhere")

# ---- backends: name -> class with from_spec(spec, env)
BACKENDS.register("llama_cpp", "systems.backends.llama_cpp:LlamaCppBackend")
BACKENDS.register("hf", "systems.backends.hf:HFBackend")
BACKENDS.register("openai", "systems.backends.openai_api:OpenAIBackend")
BACKENDS.register("llada_hf", "systems.backends.llada_hf:LLaDAHFBackend")
BACKENDS.register("mdlm", "systems.backends.mdlm:EmbeddedMDLMBackend")
BACKENDS.register("diffusion_lm", "systems.backends.diffusion_lm:DiffusionLMBackend")
BACKENDS.register("difflm", "systems.backends.difflm:DiffLMBackend")
BACKENDS.register("sentence_transformers", "systems.backends.sentence_embedder:SentenceEmbedder")

# ---- prompt optimizers steering a frozen generator (same generator-call budget for all)
SYSTEMS.register(
    "aod",
    "systems.aod:AoDSystem",
    summary="Agents of Diffusion: optimizer + judge agents steer a frozen DLM with verbal feedback; clipped REINFORCE over edit kinds",
)
SYSTEMS.register(
    "aod-static",
    "systems.aod:AoDStaticSystem",
    summary="AoD ablation: the optimizer's first proposal as a static prompt (no RL)",
)
SYSTEMS.register(
    "aod-scalar",
    "systems.aod:AoDScalarSystem",
    summary="AoD ablation: the optimizer sees the scalar reward instead of verbal feedback",
)
SYSTEMS.register(
    "promptbreeder",
    "systems.aod:PromptBreederSystem",
    summary="PromptBreeder steering the same frozen generator with the same generator-call budget",
)
SYSTEMS.register(
    "evoprompt",
    "systems.aod:EvoPromptSystem",
    summary="EvoPrompt (GA) steering the same frozen generator with the same generator-call budget",
)
SYSTEMS.register(
    "aod-norl",
    "systems.aod:AoDNoRLSystem",
    summary="AoD ablation: same loop, budget and acceptance test, frozen uniform policy over edit kinds",
)
SYSTEMS.register(
    "evoprompt-de",
    "systems.aod:EvoPromptDESystem",
    summary="EvoPrompt (differential evolution) steering the same frozen generator with the same budget",
)
