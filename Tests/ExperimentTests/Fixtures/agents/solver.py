import os


class HarnessAgent:
    def run(self, instruction, workdir):
        _, op, a, b = instruction.splitlines()[0].split()
        result = int(a) + int(b) if op == "add" else int(a) * int(b)
        with open(os.path.join(workdir, "answer.txt"), "w") as f:
            f.write(str(result))
