"""Does nothing for a long time (the SIGTERM test stops the run around it)."""
import time

print("sleeping", flush=True)
time.sleep(600)
