"""Scripted model servers that speak each provider's own wire format, for tests that drive
litellm over real HTTP: anthropic.AnthropicServer (Messages SSE, prompt caching as Anthropic
bills it), gemini.GeminiServer (streamGenerateContent SSE), ollama.OllamaServer (/api/chat
NDJSON). They take the replies of tests/modelserver.py (text, tool, tools, error, cut,
fail_midstream), whose ModelServer is the OpenAI one; base.py holds what they share.

Import the modules themselves (`from tests.providers.anthropic import AnthropicServer`): this
package imports none of them, since they import tests.modelserver, which imports base.py.
"""
