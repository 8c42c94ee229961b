"""What every part uses: atomic writes, fail points, the dataset schemas, seeds, the cache folders
and the contract of text generation (`Engine`, `Generation`)."""
