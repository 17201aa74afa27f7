"""The renderers of README's and docs/' figures from the result files under bench/."""
