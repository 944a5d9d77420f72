"""Built-in systems and backends, registered lazily by "module:attr" (importing this is cheap)."""

from bench.registry import BACKENDS, SYSTEMS

# ---- systems: name -> class taking (params: dict) and implementing bench.types.System
SYSTEMS.register("ar", "systems.ar:ARSystem", summary="direct AR generation: instruction + schema + k few-shot references")
SYSTEMS.register("file", "systems.file:FileSystem", summary="reads generations produced elsewhere")

# ---- backends: name -> class with from_spec(spec, env)
BACKENDS.register("llama_cpp", "systems.backends.llama_cpp:LlamaCppBackend")
BACKENDS.register("sentence_transformers", "systems.backends.sentence_embedder:SentenceEmbedder")
