from tau2.data_model.message import AssistantMessage


class LLMAgent:
    """The stand-in's LLM agent: no model, it answers every message with text only."""

    def __init__(self, tools, domain_policy, llm=None, llm_args=None):
        self.tools, self.domain_policy, self.llm, self.llm_args = tools, domain_policy, llm, llm_args or {}

    def get_init_state(self, message_history=None):
        return list(message_history or [])

    def generate_next_message(self, message, state):
        state.append(message)
        reply = AssistantMessage(content="I am sorry, I cannot help with that.", tool_calls=None)
        state.append(reply)
        return reply, state
