"""Speed: the speed gate's evidence, timers against independent ones, the memory floor."""
