// The supervisor's operations over an experiment (Operations), the coding agent's run loop
// and broker (Run), and the views the agent and the operator read (Views).
