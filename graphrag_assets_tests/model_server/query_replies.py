"""The test server's replies to the query and evaluation prompts: map, reduce and answer prompts, lazy search's,
Microsoft GraphRAG's own, and the JSON the evaluation and tuning prompts ask for."""

from __future__ import annotations

import json
import re

from .index_replies import kind_words, names_in, tagged


def _question_words(question: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{4,}", question.lower())} - {"what", "does", "from", "about", "with", "that"}


def _hits(question: str, text: str) -> int:
    lowered = text.lower()
    return sum(1 for w in _question_words(question) if w in lowered)


def lazy_search_reply(prompt: str, question: str) -> tuple[str, str] | None:
    """Lazy search's prompts. Scripted: a question splits at ' and '; a passage is relevant when it holds two of the
    question's words; a claim is the first sentence of each passage that holds one."""
    if "<concepts>" in prompt:
        parts = [p.strip(" ?") + "?" for p in question.split(" and ")] if " and " in question else [question]
        return "lazy_refine", json.dumps({"sub_questions": parts})
    if "<snippets>" in prompt:
        rows = [r.split("|", 1) for r in tagged(prompt, "snippets").splitlines() if "|" in r]
        return "lazy_relevance", json.dumps({"relevant": [int(n) for n, text in rows if _hits(question, text) >= 2]})
    if "<passages>" in prompt:
        passages = re.findall(r"^\[(\d+)\] (.*)$", tagged(prompt, "passages"), re.MULTILINE)
        claims = [
            {
                "claim": re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0][:200],
                "sources": [int(n)],
                "score": 20 * _hits(question, text),
            }
            for n, text in passages
            if _hits(question, text)
        ]
        return "lazy_claims", json.dumps({"claims": [{**c, "score": min(100, c["score"])} for c in claims]})
    if "<claims>" in prompt:
        rows = [r.split("|") for r in tagged(prompt, "claims").splitlines()[1:] if r.count("|") >= 2]
        cited = ", ".join(dict.fromkeys(r[2].split(",")[0].strip() for r in rows[:3]))
        return "lazy_answer", f"Answer to '{question}' from {len(rows)} claims [Data: Sources ({cited})]."
    if "<sub_answers>" in prompt:
        answers = tagged(prompt, "sub_answers").count("----Sub-question:")
        return "lazy_reduce", f"Answer to '{question}' combined from {answers} sub-answers."
    return None


def query_reply(prompt: str) -> tuple[str, str]:
    """Answers to the query prompts, derived from the question and the data the prompt carries."""
    question = tagged(prompt, "question").strip()
    lazy = lazy_search_reply(prompt, question)
    if lazy:
        return lazy
    if "<records>" in prompt:  # global search map: one point per data row that mentions the question
        rows = [r for r in tagged(prompt, "records").splitlines()[1:] if "|" in r]
        points = [
            {
                "description": f"{r.split('|')[1][:80]} bears on the question [Data: Reports ({r.split('|')[0]})]",
                "score": min(100, 10 * _hits(question, r)),
            }
            for r in rows[:20]
        ]
        return "map", json.dumps({"points": points})
    if "<points>" in prompt:
        analysts = tagged(prompt, "points").count("----Analyst")
        return "reduce", f"Answer to '{question}', merged from {analysts} analyst reports."
    if "<report>" in prompt:
        return "rate", json.dumps(
            {"reason": "word overlap", "rating": min(5, _hits(question, tagged(prompt, "report")))}
        )
    if "<reports>" in prompt:  # DRIFT's primer
        names = names_in(tagged(prompt, "reports"), limit=3)
        return "drift_primer", json.dumps(
            {
                "intermediate_answer": f"A first answer to '{question}'.",
                "score": 50,
                "follow_up_queries": [f"What is the role of {n}?" for n in names],
            }
        )
    if "<main_question>" in prompt:  # one follow-up of a DRIFT search
        follow_up = question
        # One deeper question per follow-up, so a search of depth 2 or more has something to follow.
        deeper = [] if follow_up.startswith("And then") else [f"And then, {follow_up[0].lower()}{follow_up[1:]}"]
        return "drift_local", json.dumps(
            {"response": f"On '{follow_up}': the tables answer it.", "score": 60, "follow_up_queries": deeper}
        )
    if "<answers>" in prompt:
        answers = tagged(prompt, "answers").count("\n----") + 1
        return "drift_reduce", f"Answer to '{question}' combined from {answers} intermediate answers."
    if "<earlier_questions>" in prompt:
        names = names_in(tagged(prompt, "tables"), limit=5)
        return "questions", "\n".join(f"- What happens to {n}?" for n in names)
    records = tagged(prompt, "tables" if "<tables>" in prompt else "sources").count("\n")
    return "answer", f"Answer to '{question}' from {records} records [Data: Sources (0, 1)]."


_REPORT_ROW = re.compile(r"^(\d+)\|([^|\n]*)\|", re.MULTILINE)


def microsoft_query_reply(system: str, question: str) -> tuple[str, str]:
    """Answers to Microsoft GraphRAG's query prompts (a system prompt, then the question), for the test
    that runs its query engine on our export: a map point per report row, and answers that say what they read."""
    data = system.split("---Data tables---", 1)[-1]
    if "list of key points" in system:
        points = [
            {
                "description": f"{title} bears on the question [Data: Reports ({number})]",
                "score": 50 + _hits(question, title),
            }
            for number, title in _REPORT_ROW.findall(data)
        ]
        return "ms_map", json.dumps({"points": points})
    if "---Analyst Reports---" in system:
        return "ms_reduce", f"Answer to '{question}', merged from {system.count('----Analyst')} analyst reports."
    tables = re.findall(r"^-----(\w+)-----$", data, re.MULTILINE)
    return "ms_answer", f"Answer to '{question}' from the tables {', '.join(tables)}."


def distinct_words(text: str) -> int:
    return len(set(re.findall(r"[a-z]+", text.lower())))


def key_phrase(statement: str) -> str:
    """What the scripted judge looks for in an answer: the statement's last word, in lower case."""
    return re.findall(r"[a-z]+", statement.lower())[-1]


def _count_asked(prompt: str) -> int:
    return int(re.search(r"(?:Name|Write) (\d+)", prompt).group(1))


def structured_reply(prompt: str) -> tuple[str, str] | None:
    """Entity resolution and the evaluation's prompts. Scripted: two names are one entity when they end with the
    same word; the judge prefers the answer with more distinct words, equal is a tie."""
    if "<pairs>" in prompt:  # entity resolution: the same entity when both names end with the same word
        pairs = re.findall(r"^\d+\. ([^(|]+?) \(.*?\) \| ([^(]+?) \(", tagged(prompt, "pairs"), re.MULTILINE)
        return "resolve", json.dumps({"same": [a.split()[-1] == b.split()[-1] for a, b in pairs]})
    if "<statement>" in prompt:  # assertion scoring: supported when the answer holds the statement's key phrase
        phrase = key_phrase(tagged(prompt, "statement"))
        supported = phrase in tagged(prompt, "answer").lower()
        return "assertion", json.dumps(
            {"reasoning": f"{phrase!r} {'found' if supported else 'missing'}", "supported": supported}
        )
    if "<answer_1>" in prompt:
        first, second = distinct_words(tagged(prompt, "answer_1")), distinct_words(tagged(prompt, "answer_2"))
        winner = 1 if first > second else 2 if second > first else 0
        return "judge", json.dumps({"reasoning": f"{first} against {second} distinct words", "winner": winner})
    if "<answer>" in prompt:
        claims = [c.strip() for c in re.split(r"[.;]\s+|,\s+", tagged(prompt, "answer")) if c.strip()]
        return "claims_of_answer", json.dumps({"claims": claims})
    if '{"domain":' in prompt:  # prompt tuning: the corpus's kinds are the words that follow "the" most often
        kinds = kind_words(tagged(prompt, "passages")) or ["thing"]
        profile = {
            "domain": f"passages about {' and '.join(kinds[:2])}",
            "persona": f"A reader who follows the {kinds[0]} closely",
            "language": "English",
        }
        return "tune_corpus", json.dumps(profile)
    if '{"entity_types":' in prompt:
        most = int(re.search(r"from 2 to (\d+)", prompt).group(1))
        kinds = kind_words(tagged(prompt, "passages"))[:most]
        return "tune_entity_types", json.dumps({"entity_types": kinds if len(kinds) >= 2 else ["person", "place"]})
    if '{"personas":' in prompt:
        return "personas", json.dumps({"personas": [f"Reader {i}" for i in range(_count_asked(prompt))]})
    if '{"tasks":' in prompt:
        persona = tagged(prompt, "persona").strip()
        return "tasks", json.dumps({"tasks": [f"{persona} task {i}" for i in range(_count_asked(prompt))]})
    if '{"questions":' in prompt and "<passage>" in prompt:  # data-local: about a name the passage mentions
        names = names_in(tagged(prompt, "passage"), limit=3) or ["the weather"]
        asked = [f"What happens to {names[i % len(names)]} here, detail {i}?" for i in range(_count_asked(prompt))]
        return "data_local_questions", json.dumps({"questions": asked})
    if '{"questions":' in prompt and "<notes>" in prompt:
        asked = [f"What recurs across the whole corpus, theme {i}?" for i in range(_count_asked(prompt))]
        return "data_global_questions", json.dumps({"questions": asked})
    if '{"questions":' in prompt:
        who, task = tagged(prompt, "persona").strip(), tagged(prompt, "task").strip()
        scope = "detail" if "one passage of the corpus can answer" in prompt else "theme"
        asked = [
            f"What does the corpus say about {task.lower()} for {who.lower()}, {scope} {i}?"
            for i in range(_count_asked(prompt))
        ]
        return "sensemaking_questions", json.dumps({"questions": asked})
    if "<reports>" in prompt and "<question>" not in prompt:
        names = names_in(tagged(prompt, "reports"), limit=3)
        return "corpus_description", f"A corpus about {', '.join(names) or 'many things'}."
    return None
