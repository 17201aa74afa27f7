"""Medical eponyms and the words that follow an eponym: a person-name detection on these is
medicine, not a patient, and is kept."""
EPONYMS = {
    "Addison", "Adie", "Alzheimer", "Apgar", "Asperger", "Babinski", "Baker", "Barrett", "Bartter", "Basedow",
    "Becker", "Behcet", "Behçet", "Bell", "Bence", "Berger", "Bernard", "Bland", "Bowen", "Broca", "Brugada",
    "Buerger", "Burkitt", "Chagas", "Charcot", "Chiari", "Conn", "Cooley", "Creutzfeldt", "Crigler", "Crohn",
    "Cushing", "DeBakey", "Dandy", "Down", "Dubin", "Duchenne", "Dupuytren", "Edwards", "Ehlers", "Eisenmenger",
    "Erb", "Ewing", "Fabry", "Fallot", "Fanconi", "Gaucher", "Gilbert", "Glasgow", "Goodpasture", "Gram",
    "Graves", "Guillain", "Barré", "Barre", "Hashimoto", "Henoch", "Hirschsprung", "Hodgkin", "Horner",
    "Huntington", "Hurler", "Jakob", "Kaposi", "Kawasaki", "Klinefelter", "Korsakoff", "Krabbe", "Kupffer",
    "Langerhans", "Leber", "Legg", "Lesch", "Lewy", "Lou", "Gehrig", "Lyme", "Marfan", "Meckel", "Meniere",
    "Ménière", "Merkel", "Munchausen", "Nyhan", "Osgood", "Paget", "Parkinson", "Perthes", "Peyronie", "Pick",
    "Pompe", "Prader", "Willi", "Purkinje", "Raynaud", "Reiter", "Rett", "Reye", "Schwann", "Sjogren",
    "Sjögren", "Stargardt", "Stevens", "Johnson", "Still", "Tay", "Sachs", "Tourette", "Turner", "Wegener",
    "Wernicke", "Whipple", "Wilms", "Wilson", "Wolff", "Parkinson's", "Alzheimer's", "Crohn's", "Hodgkin's",
    "Kaplan", "Meier", "Cox", "Bonferroni", "Fisher", "Pearson", "Spearman", "Mann", "Whitney", "Wilcoxon",
    "Kruskal", "Wallis", "Student", "Tukey", "Bayes", "Bayesian", "Likert", "Cohen", "Cronbach", "Kappa",
    "Wald", "Hosmer", "Lemeshow", "Youden", "Poisson", "Gauss", "Gaussian", "Markov", "Monte", "Carlo",
    "Western", "Northern", "Southern", "Sanger", "Golgi", "Krebs", "Michaelis", "Menten", "Doppler",
    "Holter", "Swan", "Ganz", "Foley", "Whipple", "Nissen", "Roux", "Billroth", "Hartmann", "Heller",
    "Kasai", "Fontan", "Glenn", "Norwood", "Ross", "Bentall", "Ilizarov", "Salter", "Harris", "Gleason",
    "Breslow", "Clark", "Dukes", "Ann", "Arbor", "Karnofsky", "Charlson", "Barthel", "Rankin", "Mallampati",
    "Child", "Pugh", "Wells", "Killip", "Forrest", "Lund", "Browder", "Ranson", "Rockall", "Blatchford",
    "Hounsfield", "Snellen", "Weber", "Rinne", "Romberg", "Kernig", "Brudzinski", "Murphy", "McBurney",
    "Rovsing", "Trendelenburg", "Valsalva", "Heimlich", "Epley", "Dix", "Hallpike", "Lachman", "Phalen",
    "Tinel", "Finkelstein", "Allen", "Homans", "Levine", "Korotkoff", "Cheyne", "Stokes", "Kussmaul",
    "Beck", "Virchow", "Sister", "Mary", "Joseph", "Auer", "Reed", "Sternberg", "Howell", "Jolly", "Heinz",
    "Mallory", "Councilman", "Aschoff", "Anitschkow", "Negri", "Russell", "Dutcher", "Call", "Exner",
    "Hurthle", "Hürthle", "Leydig", "Sertoli", "Paneth", "Clara", "Betz", "Meissner", "Pacini", "Ruffini",
    "Auerbach", "Brunner", "Peyer", "Glisson", "Bowman", "Henle", "Malpighi", "Wharton", "Stensen",
    "Eustachian", "Fallopian", "Hering", "Breuer", "Frank", "Starling", "Starling's", "Fick", "Poiseuille",
    "Laplace", "Hill", "Hardy", "Weinberg", "Mendel", "Mendelian", "Darwin", "Darwinian", "Hippocratic",
    "Hippocrates", "Galen", "Osler", "Nobel", "Medicare", "Medicaid", "Hopkins", "Mayo", "Cleveland",
}
# Words that, following a name, make it an eponym ("Parkinson's disease", "Gram stain").
EPONYM_HEADS = {
    "disease", "diseases", "syndrome", "syndromes", "disorder", "lymphoma", "sarcoma", "tumor", "tumour",
    "sign", "signs", "test", "tests", "stain", "staining", "score", "scores", "scale", "reflex", "classification",
    "criteria", "criterion", "procedure", "operation", "law", "equation", "effect", "phenomenon", "method",
    "technique", "index", "cell", "cells", "node", "nodes", "gland", "glands", "duct", "canal", "space",
    "fracture", "palsy", "ulcer", "esophagus", "oesophagus", "encephalopathy", "dementia", "anomaly",
    "malformation", "triad", "maneuver", "manoeuvre", "position", "curve", "correction", "coefficient",
    "distribution", "regression", "estimator", "blot", "blotting", "apparatus", "body", "bodies", "fibers",
    "fibres", "plexus", "area", "aphasia", "angina", "arthritis", "thyroiditis", "granulomatosis",
    "sclerosis", "dystrophy", "ataxia", "chorea", "anemia", "anaemia", "cyst", "diverticulum", "contracture",
    "phenomenon", "grade", "grading", "stage", "staging", "system", "model", "analysis", "rank", "u", "t-test",
    "kappa", "alpha", "correlation", "hypothesis", "principle", "rule", "ratio", "approach", "catheter",
    "tube", "valve", "shunt", "repair", "fundoplication", "anastomosis", "osteotomy", "flap", "lesion",
    "lesions", "spots", "nodules", "tremor", "gait", "neuroma", "neuralgia", "palsy", "block", "unit",
    "units", "coma", "outcome", "infection", "virus", "bacillus", "agar", "medium", "classification",
    "class", "type", "variant", "phenotype",
}
# Capitalized words of titles and section heads that spaCy folds into PERSON spans.
NAME_STOP_WORDS = {
    "the", "a", "an", "and", "of", "in", "for", "with", "on", "at", "to", "by", "from", "recently", "herein",
    "background", "methods", "results", "conclusion", "conclusions", "objective", "objectives", "reports",
    # Pronouns and determiners that open sentences ("She was referred ...").
    "she", "he", "they", "it", "this", "that", "there", "these", "those", "his", "her", "its", "their", "our",
    "all", "both", "each", "one", "two", "none", "most", "many", "some", "such", "no", "patients",
}
NON_NAME_WORDS = EPONYM_HEADS | NAME_STOP_WORDS | {
    "the", "a", "an", "and", "of", "in", "for", "with", "on", "at", "to", "by", "from", "recently", "herein",
    "here", "we", "our", "this", "these", "background", "methods", "method", "results", "conclusion",
    "conclusions", "objective", "objectives", "aim", "aims", "purpose", "design", "setting", "editorial",
    "review", "prognostic", "study", "trial", "group", "hospital", "university", "center", "centre",
    "institute", "clinic", "department", "health", "medical", "medicine", "national", "international",
    "society", "association", "college", "school", "foundation", "program", "programme", "project",
    "network", "registry", "database", "survey", "questionnaire", "inventory", "assessment", "protocol",
    "guideline", "guidelines", "committee", "board", "therapy", "treatment", "patient", "patients",
}
TITLES = r"(?:Dr|Mr|Mrs|Ms|Miss|Mx|Prof|Sr|Sra|Srta)\.?"
