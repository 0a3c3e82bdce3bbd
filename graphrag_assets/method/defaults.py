"""The method's defaults, in one place: the method's functions take them as their defaults, and the assets'
launch-time Config classes as theirs, so a default changed here changes both."""

# Text units: tokens each (overlap included) and tokens shared with the previous one, as in the paper.
CHUNK_SIZE = 600
CHUNK_OVERLAP = 100

# Extraction: rounds asking the model what it missed in a text unit, for entities and for claims alike.
MAX_GLEANINGS = 1

# Description summaries: tokens one call reads, tokens a summary may have, and how short a list is joined instead.
SUMMARY_MAX_INPUT_TOKENS = 4000
SUMMARY_MAX_TOKENS = 500
SUMMARIZE_ABOVE_TOKENS = 500
# The offline engine: mentions a noun phrase needs to become an entity.
OFFLINE_MIN_MENTIONS = 2

# Communities: Leiden splits a community larger than this one level down; its seed.
MAX_CLUSTER_SIZE = 10
COMMUNITY_SEED = 0xDEADBEEF

# Community reports: context budget, report length, and the small communities reported several to a request.
REPORT_MAX_CONTEXT_TOKENS = 8000
REPORT_MAX_LENGTH = 1500
REPORT_BATCH_BELOW_TOKENS = 500
REPORT_BATCH_SIZE = 5

# The offline embedding model (TF-IDF + truncated SVD fitted on the corpus): its seed.
EMBEDDING_SEED = 42

# The fast and lazy index methods: pruning of the noun-phrase graph (see offline/nlp_graph.py prune_concept_graph).
# Only a phrase in nearly every text unit is dropped (a book's hero is in most of them); an edge needs two sentences.
CONCEPT_MAX_UNIT_FRACTION = 0.9
CONCEPT_MIN_EDGE_WEIGHT = 2.0

# Lazy search: relevance tests allowed, sub-questions, units tested per community visit, empty visits before going
# deeper, and the tokens of a unit that a relevance test and a claims request read.
LAZY_RELEVANCE_BUDGET = 100
LAZY_MAX_SUB_QUESTIONS = 3
LAZY_UNITS_PER_VISIT = 5
LAZY_PATIENCE = 3
LAZY_SNIPPET_TOKENS = 80
LAZY_CLAIM_PASSAGE_TOKENS = 240

# Hybrid retrieval: a keyword (BM25) rank's weight against a vector rank's in reciprocal rank fusion; the text
# units that best match the question itself that local search packs whole before its entities' own, and the units
# after them that it packs as passages of at most PASSAGE_TOKENS. Measured with answer keys (scripts/benchmark.py
# retrieval).
KEYWORD_WEIGHT = 2.0
QUESTION_UNITS = 3
QUESTION_PASSAGES = 13
PASSAGE_TOKENS = 200
# Passages fill a context's budget more fully than whole units did: at 8,000 tokens, hybrid local and DRIFT contexts
# were larger than before it (medians up 3% and 9%). These budgets hold them at or below, finding the answer as
# often: local search's context, and DRIFT's passages a follow-up, which every follow-up packs again.
LOCAL_CONTEXT_TOKENS = 7700
DRIFT_QUESTION_PASSAGES = 10
