"""An inspect_ai task whose data ships inside inspect_ai itself, for `benchmark: inspect`.

theory_of_mind: inspect_ai's example dataset (inspect_ai/dataset/_examples/theory_of_mind.jsonl,
100 short stories, each asking where a character thinks an object is), graded by `exact()`: the
answer passes when it is the expected location (case and surrounding punctuation aside). Not
`includes()`, which passes any answer that contains the location: an answer listing every place
the story names passed all 100 samples in a review. The samples have no ids of their own; inspect
numbers them 1..100 in file order.
"""
from inspect_ai import Task, task
from inspect_ai.dataset import example_dataset
from inspect_ai.scorer import exact
from inspect_ai.solver import generate


@task
def theory_of_mind():
    return Task(dataset=example_dataset("theory_of_mind"), solver=generate(), scorer=exact())
