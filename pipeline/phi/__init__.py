"""PHI de-identification engine (Presidio + spaCy NER + our recognizers), shared by the phi
stage and the run report."""
