"""Built-in task families, registered lazily by "module:attr" (importing this module is cheap).

Each entry resolves to a loader implementing `bench.tasks.base.TaskFamily`. An entry with meta
`members=True` is a family whose concrete tasks are `<family>/<member>` and depend on the data dir
(`superni/<task>` for every task file present); the bare family name is not itself a task.
"""

from bench.registry import TASKS

TASKS.register(
    "demo/booking",
    "bench.tasks.demo:BOOKING",
    summary="48 flight bookings shipped with the package (no data dir needed)",
    family="demo",
)
TASKS.register(
    "multiwoz/train",
    "bench.tasks.multiwoz:TRAIN",
    summary="MultiWOZ 2.2 train timetable entities (2,828)",
    family="multiwoz",
)
TASKS.register(
    "multiwoz/hotel",
    "bench.tasks.multiwoz:HOTEL",
    summary="MultiWOZ 2.2 hotel entities, nested price object and location pair (33)",
    family="multiwoz",
)
TASKS.register(
    "multiwoz/restaurant",
    "bench.tasks.multiwoz:RESTAURANT",
    summary="MultiWOZ 2.2 restaurant entities (110)",
    family="multiwoz",
)
TASKS.register(
    "multiwoz/attraction",
    "bench.tasks.multiwoz:ATTRACTION",
    summary="MultiWOZ 2.2 attraction entities (79)",
    family="multiwoz",
)
TASKS.register(
    "truthfulqa",
    "bench.tasks.truthfulqa:CURRENT",
    summary="TruthfulQA items, current 790-question file",
    family="truthfulqa",
)
TASKS.register(
    "truthfulqa/v1",
    "bench.tasks.truthfulqa:V1",
    summary="TruthfulQA items, classic 817-question file (v1)",
    family="truthfulqa",
)
TASKS.register(
    "self_instruct",
    "bench.tasks.self_instruct:SELF_INSTRUCT",
    summary="Self-Instruct instruction/input/output instances (175 seed + 252 user-oriented)",
    family="self_instruct",
)
TASKS.register(
    "superni",
    "bench.tasks.superni:SUPERNI",
    summary="superni/<task>: Super-NaturalInstructions, one task per task file in the data dir (input/output)",
    family="superni",
    members=True,
)
TASKS.register(
    "bfcl",
    "bench.tasks.bfcl:BFCL_FAMILY",
    summary="bfcl/<category>: BFCL v4 single-turn tool calls, one item per question (AST-scored)",
    family="bfcl",
    members=True,
)
TASKS.register(
    "jsonschemabench",
    "bench.tasks.jsonschemabench:JSONSCHEMABENCH",
    summary="jsonschemabench/<split>: JSONSchemaBench schemas, one item per schema file (no records)",
    family="jsonschemabench",
    members=True,
)
