// Code highlighting (highlight.js) and markdown (marked + DOMPurify) for the chat page.
import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import css from 'highlight.js/lib/languages/css';
import java from 'highlight.js/lib/languages/java';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import markdown from 'highlight.js/lib/languages/markdown';
import plaintext from 'highlight.js/lib/languages/plaintext';
import powershell from 'highlight.js/lib/languages/powershell';
import python from 'highlight.js/lib/languages/python';
import r from 'highlight.js/lib/languages/r';
import ruby from 'highlight.js/lib/languages/ruby';
import shell from 'highlight.js/lib/languages/shell';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';
import { Marked } from 'marked';
import { markedHighlight } from 'marked-highlight';

// The languages oi-lsp runs (and a few that models write about); others show as plain text.
for (const [name, lang] of Object.entries({
    bash, css, java, javascript, json, markdown, plaintext, powershell, python, r, ruby, shell, sql, typescript, xml, yaml,
})) hljs.registerLanguage(name, lang);
hljs.registerAliases(['pwsh', 'ps1'], { languageName: 'powershell' });
hljs.registerAliases(['node'], { languageName: 'javascript' });

/** Highlighted HTML of code (highlight.js escapes the code itself). */
export function highlight(code: string, language: string): string {
    const known = hljs.getLanguage(language) ? language : 'plaintext';
    return hljs.highlight(code, { language: known, ignoreIllegals: true }).value;
}

const markdownParser = new Marked(
    { gfm: true, breaks: false },
    markedHighlight({ emptyLangClass: 'hljs', langPrefix: 'hljs language-', highlight }),
);

/** Markdown to safe HTML: scripts, event handlers and javascript: URLs are removed. */
export function renderMarkdown(text: string): string {
    return DOMPurify.sanitize(markdownParser.parse(text, { async: false }));
}

