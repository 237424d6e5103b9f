// A turn's tokens and cost (oi/turn's usage), shown small under the turn.
import { showSessionCost, usd } from './header';

export interface Usage { promptTokens: number; completionTokens: number; calls: number; cost?: number; sessionCost?: number }

export function usageText(u: Usage): string {
    const tokens = u.promptTokens + u.completionTokens;
    const parts = [`${tokens.toLocaleString('en-US')} tokens (${u.promptTokens.toLocaleString('en-US')} in, ${u.completionTokens.toLocaleString('en-US')} out)`];
    if (u.calls > 1) parts.push(`${u.calls} model calls`);
    if (u.cost !== undefined) parts.push(usd(u.cost));
    return parts.join(' · ');
}

/** The line under the turn, and the session's total in the header. */
export function showUsage(log: HTMLElement, u: Usage): void {
    if (!u.calls || !(u.promptTokens + u.completionTokens)) return; // no model call answered
    const line = document.createElement('div');
    line.className = 'oi-usage';
    line.textContent = usageText(u);
    line.title = 'Tokens counted by litellm (estimates); cost from litellm\'s price list when it knows the model';
    log.append(line);
    if (u.sessionCost !== undefined) showSessionCost(u.sessionCost);
}
