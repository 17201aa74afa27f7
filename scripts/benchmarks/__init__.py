"""Speed, memory and fault benchmarks, each writing its result file under bench/."""
