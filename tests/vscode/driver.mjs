// Drives a code-server workbench in headless Chromium (playwright-core) for test_e2e.py.
// One JSON request per stdin line ({id, op, ...}), one JSON answer per stdout line
// ({id, ok, value?, error?}). The chat view lives in nested webview iframes: `chat*` ops find
// the frame that holds #oi-log.
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ['--no-sandbox'] });
const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
const page = await context.newPage();
let url;

async function workbench() {
    await page.locator('.monaco-workbench').waitFor({ timeout: 60000 });
}

async function chatFrame(timeout = 30000) {
    const until = Date.now() + timeout;
    for (;;) {
        for (const frame of page.frames()) {
            try {
                if (await frame.locator('#oi-log').count()) return frame;
            } catch { /* a frame that went away */ }
        }
        if (Date.now() > until) throw new Error('the chat view is not showing');
        await page.waitForTimeout(250);
    }
}

/** Run a command through the palette; its list is a snapshot, so retry until the title shows.
 * `escape: false` keeps the editor's selection (Escape first would clear it). */
async function command(title, escape = true) {
    for (let attempt = 0; ; attempt++) {
        if (escape || attempt > 0) await page.keyboard.press('Escape');
        await page.keyboard.press('F1');
        const box = page.locator('.quick-input-widget input');
        await box.waitFor({ timeout: 10000 });
        await box.fill('>' + title);
        const row = page.locator('.quick-input-list .monaco-list-row', { hasText: title }).first();
        try {
            await row.waitFor({ timeout: 3000 });
            await page.keyboard.press('Enter');
            return;
        } catch (err) {
            if (attempt >= 8) throw err;
        }
    }
}

const ops = {
    async open({ url: u }) {
        url = u;
        await page.goto(url);
        await workbench();
    },
    async reload() {
        await page.goto(url);
        await workbench();
    },
    command: ({ title, escape }) => command(title, escape ?? true),
    /** Type text into what has the focus, as a paste would (no auto-closed brackets). */
    async insertText({ text }) {
        await page.keyboard.insertText(text);
    },
    async keys({ keys }) {
        for (const key of keys) await page.keyboard.press(key);
    },
    /** Answer the open input box (showInputBox) and accept it. With `title`, only the box of
     * that title: right after a command is picked, the palette's own box may still be there. */
    async quickInput({ text, title }) {
        if (title) {
            await page.locator('.quick-input-widget .quick-input-title', { hasText: title })
                .waitFor({ timeout: 10000 });
        }
        const box = page.locator('.quick-input-widget input');
        await box.waitFor({ timeout: 10000 });
        await box.fill(text);
        await box.press('Enter');
    },
    /** Type into the open quick input, as a person does, without accepting it. */
    async typeQuick({ text }) {
        const box = page.locator('.quick-input-widget input');
        await box.waitFor({ timeout: 10000 });
        await box.pressSequentially(text, { delay: 40 });
    },
    async openFile({ name }) {
        await page.keyboard.press('Escape');
        await page.keyboard.press('Control+P');
        const box = page.locator('.quick-input-widget input');
        await box.waitFor({ timeout: 10000 });
        await box.fill(name);
        await page.locator('.quick-input-list .monaco-list-row', { hasText: name }).first().waitFor({ timeout: 10000 });
        await page.keyboard.press('Enter');
        await page.locator('.monaco-editor .view-lines').first().waitFor({ timeout: 10000 });
        await page.locator('.monaco-editor .view-lines').first().click();
    },
    /** Select lines of the active editor with the mouse (from the start of one to the end of another). */
    async dragSelect({ from, to }) {
        const lines = await page.locator('.monaco-editor .view-lines .view-line').evaluateAll((els) =>
            els.map((e) => { const r = e.getBoundingClientRect(); return { top: r.top, height: r.height, left: r.left, right: r.left + (e.firstElementChild?.getBoundingClientRect().width ?? 0) }; })
                .sort((a, b) => a.top - b.top));
        const a = lines[from - 1];
        const b = lines[to - 1];
        await page.mouse.move(a.left + 1, a.top + a.height / 2);
        await page.mouse.down();
        await page.mouse.move(b.right + 2, b.top + b.height / 2, { steps: 5 });
        await page.mouse.up();
    },
    /** Wait for an element of the workbench itself (a notification toast, ...). */
    async wait({ selector, hasText, timeout = 30000, state = 'visible' }) {
        await page.locator(selector, hasText ? { hasText } : {}).last().waitFor({ timeout, state });
    },
    /** The same wait, answering whether it came instead of failing. */
    async waitOptional({ selector, hasText, timeout = 30000, state = 'visible' }) {
        try {
            await page.locator(selector, hasText ? { hasText } : {}).last().waitFor({ timeout, state });
            return true;
        } catch {
            return false;
        }
    },
    /** Evaluate an expression in the workbench page itself (not the chat's frame). */
    evaluate: ({ expression }) => page.evaluate(expression),
    async click({ selector, hasText }) {
        await page.locator(selector, hasText ? { hasText } : {}).last().click({ timeout: 30000 });
    },
    async chatSend({ text }) {
        const frame = await chatFrame();
        const input = frame.locator('#oi-input');
        await input.fill(text);
        // The page clears the box when it sends; a key press that raced the view's (re)load is
        // pressed again.
        for (let attempt = 0; attempt < 5; attempt++) {
            await input.press('Enter');
            try {
                await frame.waitForFunction(() => document.getElementById('oi-input').value === '', null, { timeout: 3000 });
                return;
            } catch { /* not sent yet */ }
        }
        throw new Error('the chat input did not send');
    },
    async chatWait({ selector, hasText, timeout = 60000, state = 'visible' }) {
        const frame = await chatFrame();
        await frame.locator(selector, hasText ? { hasText } : {}).last().waitFor({ timeout, state });
    },
    async chatClick({ selector }) {
        const frame = await chatFrame();
        await frame.locator(selector).last().click({ timeout: 30000 });
    },
    async chatFill({ selector, text }) {
        const frame = await chatFrame();
        await frame.locator(selector).last().fill(text);
    },
    async chatEval({ expression }) {
        const frame = await chatFrame();
        return frame.evaluate(expression);
    },
    /** Evaluate an expression in the workbench page itself (not the chat's frame). */
    async eval({ expression }) {
        return page.evaluate(expression);
    },
    async screenshot({ path }) {
        await page.screenshot({ path });
    },
    async close() {
        await browser.close();
        process.exit(0);
    },
};

for await (const line of createInterface({ input: process.stdin })) {
    const request = JSON.parse(line);
    let answer;
    try {
        answer = { id: request.id, ok: true, value: await ops[request.op](request) ?? null };
    } catch (err) {
        answer = { id: request.id, ok: false, error: String(err?.stack ?? err) };
    }
    process.stdout.write(JSON.stringify(answer) + '\n');
}
await browser.close();
