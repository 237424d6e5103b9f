// The chat page alone in Chromium: the page the extension serves (out/page.js, dist/webview.js,
// media/chat.css) behind its CSP, fed a recorded notification sequence through the extension's
// own router (out/router.js), with acquireVsCodeApi replaced by a recorder of what it posts.
// Usage: node webview_page.mjs <input.json>; prints a JSON report of what the page shows.
// input: {mode: "replay", notifications: [[method, params]], folders, decisions: [...], history,
//         screenshot} or {mode: "input", screenshot} or {mode: "attach", png (base64), screenshot}
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');
const ext = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../clients/vscode');
const { chatHtml } = require(path.join(ext, 'out/page.js'));
const { Router } = require(path.join(ext, 'out/router.js'));
const input = JSON.parse(readFileSync(process.argv[2], 'utf8'));

const files = { '/dist/webview.js': 'text/javascript', '/media/chat.css': 'text/css' };
const server = createServer((req, res) => {
    if (req.url === '/') {
        const origin = `http://127.0.0.1:${server.address().port}`;
        res.writeHead(200, { 'Content-Type': 'text/html' });
        res.end(chatHtml({ cspSource: origin, nonce: 'TestNonce0123456789', script: `${origin}/dist/webview.js`, style: `${origin}/media/chat.css` }));
    } else if (files[req.url]) {
        res.writeHead(200, { 'Content-Type': files[req.url] });
        res.end(readFileSync(path.join(ext, req.url)));
    } else {
        res.writeHead(404);
        res.end();
    }
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ['--no-sandbox'] });
const report = { posted: [], violations: [], errors: [] };
try {
    const page = await browser.newPage({ viewport: { width: 420, height: 900 } });
    page.on('pageerror', (err) => report.errors.push(String(err)));
    await page.exposeFunction('__violation', (v) => report.violations.push(v));
    await page.addInitScript(() => {
        window.__posted = [];
        window.acquireVsCodeApi = () => ({ postMessage: (m) => window.__posted.push(m) });
        document.addEventListener("securitypolicyviolation", (e) => window.__violation(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber} ${e.sample}`));
    });
    await page.goto(`http://127.0.0.1:${server.address().port}/`);
    await page.waitForFunction(() => window.__posted.some((m) => m.type === 'ready'));
    const post = (message) => page.evaluate((m) => window.postMessage(m, '*'), message);

    if (input.mode === 'replay') {
        const router = new Router(input.folders);
        await post({ type: 'folders', folders: input.folders, current: router.current, trusted: true, autoRun: false });
        const decisions = [...input.decisions];
        for (const [method, params] of input.notifications) {
            const message = router.notification(method, params);
            if (!message) continue;
            await post(message);
            if (message.type !== 'proposal' || message.proposal.autoRun) continue;
            // Answer the proposal the way the recorded session did, through the page's buttons.
            const id = message.proposal.proposalId;
            const box = page.locator(`[data-proposal-id="${id}"]`);
            const d = decisions.shift();
            const buttons = await box.locator('.oi-actions button').allTextContents();
            report.buttons = report.buttons ?? buttons;
            (report.everyButtons ??= []).push(buttons);
            if (input.proposalScreenshot && !report.proposalShot) {
                report.proposalShot = true;
                await page.screenshot({ path: input.proposalScreenshot, fullPage: true });
            }
            if (d.decision === 'edit') {
                // Edit opens an editor tab (the extension's part, played here): "Run edited"
                // sends the tab's text as the approval and tells the view.
                await box.locator('button.oi-edit').click();
                await box.locator('button.oi-run-edited').click();
                await page.evaluate(({ id, code }) => window.__posted.push({ type: 'approve', proposalId: id, decision: 'edit', code }), { id, code: d.code });
                await post({ type: 'approved', proposalId: id, code: d.code });
            } else {
                // 'always': the "Always `<command>`" button (run, and save an allow rule).
                await box.locator(`button.oi-${d.decision}`).click();
            }
        }
        await page.waitForTimeout(100); // the markdown renderer batches every 30 ms
        report.live = await page.evaluate(snapshot);
        if (input.screenshot) await page.screenshot({ path: input.screenshot, fullPage: true });
        if (input.history) {
            await post({ type: 'history', workspace: input.folders[0].uri, messages: input.history });
            report.history = await page.evaluate(snapshot);
            if (input.historyScreenshot) await page.screenshot({ path: input.historyScreenshot, fullPage: true });
        }
    } else if (input.mode === 'input') {
        const box = page.locator('#oi-input');
        await box.click();
        await box.pressSequentially('first line');
        await box.press('Shift+Enter');
        await box.pressSequentially('second line');
        report.beforeSend = await box.inputValue();
        await box.press('Enter');
        report.afterSend = await box.inputValue();
        await box.pressSequentially('another');
        await box.press('Enter');
        await box.press('ArrowUp');
        report.up1 = await box.inputValue();
        await box.press('Home');
        await box.press('ArrowUp');
        report.up2 = await box.inputValue();
        await box.press('End');
        await box.press('ArrowDown');
        report.down1 = await box.inputValue();
        await box.press('End');
        await box.press('ArrowDown');
        report.down2 = await box.inputValue();
        await box.press('Enter'); // empty: nothing is sent
        await page.locator('#oi-stop').evaluate((b) => b.click());
    } else if (input.mode === 'attach') {
        // A pasted PNG, then a drop of a PNG and a text file (not an image: left alone).
        await page.evaluate((png) => {
            const bytes = Uint8Array.from(atob(png), (c) => c.charCodeAt(0));
            const box = document.getElementById('oi-input');
            const pasted = new DataTransfer();
            pasted.items.add(new File([bytes], 'pasted.png', { type: 'image/png' }));
            box.dispatchEvent(new ClipboardEvent('paste', { clipboardData: pasted, bubbles: true, cancelable: true }));
            const dropped = new DataTransfer();
            dropped.items.add(new File([bytes], 'dropped.png', { type: 'image/png' }));
            dropped.items.add(new File(['text'], 'notes.txt', { type: 'text/plain' }));
            box.dispatchEvent(new DragEvent('drop', { dataTransfer: dropped, bubbles: true, cancelable: true }));
        }, input.png);
        await page.waitForFunction(() => document.querySelectorAll('.oi-attachment').length === 2);
        report.chips = await page.evaluate(() => [...document.querySelectorAll('.oi-attachment')].map((e) => e.textContent));
        if (input.screenshot) await page.screenshot({ path: input.screenshot });
        const box = page.locator('#oi-input');
        await box.click();
        await box.pressSequentially('what are these?');
        await box.press('Enter');
        report.chipsAfter = await page.evaluate(() => document.querySelectorAll('.oi-attachment').length);
    }
    report.posted = await page.evaluate(() => window.__posted);
} finally {
    await browser.close();
    server.close();
}
process.stdout.write(JSON.stringify(report));

// What the page shows, read in the page.
function snapshot() {
    const log = document.getElementById('oi-log');
    const all = (sel) => [...log.querySelectorAll(sel)];
    return {
        users: all('.oi-user').map((e) => e.textContent),
        assistantHtml: all('.oi-assistant').map((e) => e.innerHTML),
        assistantText: all('.oi-assistant').map((e) => e.textContent),
        codes: all('.oi-code').map((e) => ({
            language: e.dataset.language, code: e.querySelector('.oi-source code')?.textContent,
            note: e.querySelector('.oi-note')?.textContent ?? null, actions: !!e.querySelector('.oi-actions'),
            risk: e.querySelector('.oi-risk')?.textContent ?? null,
            always: e.querySelector('.oi-always-note')?.textContent ?? null,
            output: e.querySelector('details.oi-output pre')?.textContent ?? null,
            outputOpen: e.querySelector('details.oi-output')?.open ?? null,
            images: [...e.querySelectorAll('img.oi-image')].map((i) => ({ src: i.src.slice(0, 30), width: i.naturalWidth })),
            highlighted: e.querySelectorAll('.oi-source code span[class^="hljs-"]').length,
        })),
        scripts: log.querySelectorAll('script').length,
        handlers: [...log.querySelectorAll('*')].filter((e) => [...e.attributes].some((a) => a.name.startsWith('on'))).length,
        javascriptLinks: all('a').filter((a) => (a.getAttribute('href') ?? '').startsWith('javascript:')).length,
        pwned: window.__pwned ?? null,
        notices: all('.oi-notice, .oi-error').map((e) => e.textContent),
        statusHidden: document.getElementById('oi-status').hidden,
    };
}
