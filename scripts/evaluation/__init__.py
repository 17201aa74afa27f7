"""The PHI evaluation (leave-one-source-out), its generators of synthetic PHI, the literature
audit, and the checks that a trainer reads final/."""
