"""Query methods: global, local, DRIFT, basic (SS), text summarization (TS), question generation."""
