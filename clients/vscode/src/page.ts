// The chat page's HTML. Pure, so the webview test in Chromium loads the very same page.

/** The page: no remote resources; scripts only with the nonce; images from data: URIs. */
export function chatHtml(o: { cspSource: string; nonce: string; script: string; style: string }): string {
    const csp = [
        "default-src 'none'",
        `style-src ${o.cspSource}`,
        `img-src ${o.cspSource} data:`,
        `font-src ${o.cspSource}`,
        `script-src 'nonce-${o.nonce}'`,
    ].join('; ');
    return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${o.style}">
<title>Open Interpreter</title>
</head>
<body>
<div id="oi-chat">
  <header id="oi-header"><span id="oi-folder-label">Folder:</span> <select id="oi-folder" aria-label="Workspace folder"></select><span id="oi-trust"></span></header>
  <main id="oi-log" aria-live="polite"></main>
  <div id="oi-status" hidden><span class="oi-spinner"></span><span id="oi-status-text"></span><button id="oi-stop" type="button">Stop</button></div>
  <footer><div id="oi-attached" hidden></div><div id="oi-compose"><textarea id="oi-input" rows="3" placeholder="Ask Open Interpreter… (Enter to send, Shift+Enter for a new line)"></textarea><button id="oi-send" type="button" title="Send (Enter)">Send</button></div></footer>
</div>
<script nonce="${o.nonce}" src="${o.script}"></script>
</body>
</html>`;
}
