"""Prompt optimizers that steer a frozen generator: AoD (ours to reproduce), PromptBreeder, EvoPrompt.

All share one verb, `PromptOptimizer.optimize(generator, spec, seed, ctx, budget)` (systems.optimizers.base),
so a new optimizer is one module. The systems that wrap them live in `systems/aod.py`.
"""
