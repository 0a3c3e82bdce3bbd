"""Jobs, the sensor that finds new corpora and the nightly re-index schedule."""
