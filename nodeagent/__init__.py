"""mlsched node agent: one per GPU server; runs and watches the training processes of jobs.

Public entry points: :class:`AgentConfig`, :class:`NodeAgent` and :func:`add_agent_command`.
"""

from nodeagent.agent import NodeAgent
from nodeagent.cli import add_agent_command
from nodeagent.config import AgentConfig

__all__ = ["AgentConfig", "NodeAgent", "add_agent_command"]
