// A protected MCP server for switchyard's end-to-end sign-in test
// (tests/e2e/interop/real_oauth.rs): the TypeScript SDK's Streamable HTTP server at /mcp, which
// takes only access tokens that the authorization server ISSUER signed for this very resource.
//
//   node oauth-mcp-server.mjs PORT ISSUER
//
// - Without a valid token it answers 401 with `WWW-Authenticate: Bearer resource_metadata=...`
//   (RFC 6750, RFC 9728), and serves that Protected Resource Metadata naming ISSUER.
// - A token is checked as a JWT access token (RFC 9068): signed by a key of ISSUER's JWKS,
//   issued by ISSUER, audience this resource, not expired, with the scope `mcp:tools`.
// - POST /test/revoke-seen makes it refuse every token it has accepted so far (as if they were
//   revoked), for the test of a refusal that a refresh answers.
// - The tool `whoami` answers with the token's subject, client and id (`jti`, which tells one
//   token from the next: a refresh shows as a new one).
//
// It prints one JSON line per request on stdout: whether it carried a token and what became of
// it (never the token itself).

import http from 'node:http';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';

const [port, issuer] = process.argv.slice(2);
if (!port || !issuer) {
  console.error('usage: node oauth-mcp-server.mjs PORT ISSUER');
  process.exit(2);
}
const origin = `http://127.0.0.1:${port}`;
const resource = `${origin}/mcp`;
const metadataUrl = `${origin}/.well-known/oauth-protected-resource/mcp`;
const scope = 'mcp:tools';
const jwks = createRemoteJWKSet(new URL(`${issuer}/jwks`));
// The ids of the tokens accepted so far, and of those refused from now on.
const seen = new Set();
const revoked = new Set();

const say = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);

// The token's claims, or throws why it is not good here.
async function check(header) {
  const [kind, token] = (header ?? '').split(' ');
  if (kind !== 'Bearer' || !token) {
    throw Object.assign(new Error('no bearer token'), { missing: true });
  }
  const { payload } = await jwtVerify(token, jwks, { issuer, audience: resource, typ: 'at+jwt' });
  if (revoked.has(payload.jti)) {
    throw new Error('the token was revoked');
  }
  if (!String(payload.scope ?? '').split(' ').includes(scope)) {
    throw Object.assign(new Error(`the token lacks the scope ${scope}`), { scope: true });
  }
  return payload;
}

function refuse(res, status, error, description) {
  let challenge = `Bearer resource_metadata="${metadataUrl}", scope="${scope}"`;
  if (error) challenge += `, error="${error}", error_description="${description}"`;
  res.writeHead(status, { 'WWW-Authenticate': challenge, 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ error: error ?? 'unauthorized' }));
}

function mcpServer(claims) {
  const server = new McpServer({ name: 'oauth-protected', version: '1.0.0' });
  server.registerTool(
    'whoami',
    { description: 'Who the access token says the caller is.', inputSchema: {} },
    async () => ({
      content: [
        {
          type: 'text',
          text: JSON.stringify({ sub: claims.sub, client_id: claims.client_id, jti: claims.jti, aud: claims.aud }),
        },
      ],
    }),
  );
  return server;
}

const httpServer = http.createServer(async (req, res) => {
  const path = new URL(req.url, origin).pathname;
  if (path === '/.well-known/oauth-protected-resource/mcp' && req.method === 'GET') {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(
      JSON.stringify({
        resource,
        authorization_servers: [issuer],
        scopes_supported: [scope],
        bearer_methods_supported: ['header'],
      }),
    );
    return;
  }
  if (path === '/test/revoke-seen' && req.method === 'POST') {
    for (const jti of seen) revoked.add(jti);
    res.writeHead(204).end();
    return;
  }
  if (path !== '/mcp') {
    res.writeHead(404).end();
    return;
  }
  let claims;
  try {
    claims = await check(req.headers.authorization);
  } catch (e) {
    say({ event: 'request', method: req.method, token: e.missing ? 'none' : 'refused', why: e.message });
    if (e.missing) refuse(res, 401);
    else if (e.scope) refuse(res, 403, 'insufficient_scope', e.message);
    else refuse(res, 401, 'invalid_token', 'the access token is not valid here');
    return;
  }
  seen.add(claims.jti);
  say({ event: 'request', method: req.method, token: 'accepted', jti: claims.jti, client_id: claims.client_id });
  if (req.method !== 'POST') {
    // Stateless: no standalone stream, no session to delete.
    res.writeHead(405, { Allow: 'POST' }).end();
    return;
  }
  const server = mcpServer(claims);
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on('close', () => {
    transport.close();
    server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(req, res);
});

httpServer.listen(Number(port), '127.0.0.1', () => say({ event: 'listening', resource }));
