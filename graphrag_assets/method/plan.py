"""An index run's plan: where the corpus's graph comes from (its documents, or a Microsoft GraphRAG output to
import), how it is built (standard, fast or lazy), by what (a chat model, or the offline engine), and so what each
step does and what it skips. Decided in one place from the corpus and the run's settings; the steps read it
rather than work it out again."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class IndexPlan:
    corpus: str
    imported: Path | None  # a Microsoft GraphRAG output to import; None: a folder of documents
    method: str  # standard, fast or lazy
    chat: str | None  # the chat model; None: the offline engine
    claims_enabled: bool = True
    aliases_enabled: bool = True
    aliases_on_imported: bool = False

    @property
    def source(self) -> str:
        return "Microsoft GraphRAG output (imported)" if self.imported else "documents"

    @property
    def builds_concept_graph(self) -> bool:
        """The graph is noun phrases and their co-occurrence: the fast and lazy methods, or no model."""
        return self.method != "standard" or self.chat is None

    @property
    def claims_skipped_because(self) -> str | None:
        if self.imported:
            return None  # imported with the rest
        if not self.claims_enabled:
            return "claims are switched off"
        if self.method != "standard":
            return f"a {self.method} index extracts no claims"
        if self.chat is None:
            return "the offline engine extracts no claims"
        return None

    @property
    def aliases_by_model(self) -> bool:
        """Candidate aliases are judged by the chat model (a fast or lazy index pays for no call here either)."""
        return self.chat is not None and self.method == "standard"

    @property
    def looks_for_aliases(self) -> bool:
        return self.aliases_enabled and (self.aliases_on_imported or not self.imported)

    @property
    def writes_reports(self) -> bool:
        """LazyGraphRAG defers every model call to the question: a lazy index writes no reports."""
        return bool(self.imported) or self.method != "lazy"

    def steps(self) -> dict[str, str]:
        """What each step of the index does in this run, in a phrase: the plan as a person reads it."""
        model = f"the chat model {self.chat}" if self.chat else None
        if self.imported:
            imported = f"imported from {self.imported}"
            steps = dict.fromkeys(
                ("documents", "entity_graph", "covariates", "communities", "community_reports"), imported
            )
        else:
            concepts = (
                f"noun phrases and their co-occurrence ({self.method} method), no model call"
                if self.method != "standard"
                else "names and their co-occurrence (offline engine)"
            )
            reports = (
                "none: a lazy index writes no reports"
                if not self.writes_reports
                else "extractive, from the community's text (offline)"
                if model is None
                else f"written by {model} from "
                + ("source text units" if self.method == "fast" else "entity and relationship descriptions")
            )
            steps = {
                "documents": "read and chunked from the corpus folder",
                "entity_graph": concepts if self.builds_concept_graph else f"extracted by {model}",
                "covariates": f"none: {self.claims_skipped_because}"
                if self.claims_skipped_because
                else f"extracted by {model}",
                "communities": "hierarchical Leiden",
                "community_reports": reports,
            }
        aliases = (
            ("candidates judged by " + model if self.aliases_by_model else "candidates confirmed by rule")
            if self.looks_for_aliases
            else "none: " + ("switched off" if not self.aliases_enabled else "an imported graph is kept as it is")
        )
        order = ("documents", "entity_graph", "entity_aliases", "covariates", "communities", "community_reports")
        return {step: aliases if step == "entity_aliases" else steps[step] for step in order}

    def as_markdown(self) -> str:
        lines = [
            f"- **source**: {self.source}",
            f"- **method**: {self.method}",
            f"- **engine**: {self.chat or 'offline'}",
        ]
        return "\n".join(lines + [f"- {step}: {what}" for step, what in self.steps().items()])
