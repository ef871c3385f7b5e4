"""A demo writer: asks for what it needs, reports progress, and streams its text in chunks."""

import re
import time

from .base import AgentContext, Executor

FORMS = ("poem", "story", "summary", "haiku", "letter")


def _topic_and_form(texts: list[str]) -> tuple[str, str]:
    joined = " ".join(texts).strip()
    form = next((f for f in FORMS if re.search(rf"\b{f}\b", joined, re.I)), "")
    topic = ""
    match = re.search(r"\babout\s+(.+)", joined, re.I)
    if match:
        topic = match.group(1).strip().rstrip(".!?")
    return topic, form


def _compose(topic: str, form: str, paragraphs: int) -> list[str]:
    lines = {
        "haiku": [f"{topic.capitalize()} drifts slowly,", "a quiet thought takes its shape,", "then the page is full."],
    }.get(form)
    if lines:
        return [line + "\n" for line in lines]
    return [
        f"{['It began', 'Then', 'Later', 'At last', 'In the end'][i % 5]} with {topic}: "
        f"paragraph {i + 1} of a {form} about {topic}.\n"
        for i in range(paragraphs)
    ]


class WriterExecutor(Executor):
    """Writes a short piece "about <topic>" in a form (poem, story, summary, haiku, letter).

    A request without both a topic and a form is ambiguous: the writer asks for input and
    reads the whole conversation again when the answer comes. Settings: `delay` (seconds
    between steps, default 0.2), `paragraphs` (default 4).
    """

    name = "writer"
    settings_schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "delay": {"type": "number", "minimum": 0, "maximum": 60, "description": "seconds between chunks"},
            "paragraphs": {"type": "integer", "minimum": 1, "maximum": 50, "description": "how many to write"},
        },
    }
    rerunnable = True  # answers from the message alone; a second run repeats the first
    description = "Writes a short text in several streamed chunks; asks when the request is unclear."

    def execute(self, ctx: AgentContext) -> None:
        delay = float(ctx.settings.get("delay", 0.2))
        topic, form = _topic_and_form(ctx.user_texts)
        if not topic or not form:
            missing = " and ".join(
                x for x, ok in (("a topic ('about …')", topic), (f"a form ({', '.join(FORMS)})", form)) if not ok
            )
            ctx.require_input(f"What should I write? Please give {missing}.")
            return
        ctx.working(f"Planning a {form} about {topic}.")
        time.sleep(delay)
        chunks = _compose(topic, form, int(ctx.settings.get("paragraphs", 4)))
        ctx.working(f"Writing {len(chunks)} parts.")
        artifact_id = None
        for i, chunk in enumerate(chunks):
            if ctx.cancelled:
                return
            time.sleep(delay)
            artifact_id = ctx.artifact(
                chunk,
                artifact_id=artifact_id,
                name=f"{form}.txt",
                description=f"A {form} about {topic}",
                append=i > 0,
                last_chunk=i == len(chunks) - 1,
            )
        words = sum(len(c.split()) for c in chunks)
        ctx.complete(f"Done: a {form} about {topic}, {words} words.")
