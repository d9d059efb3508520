// A loopback HTTP proxy that adds `Authorization: Bearer TOKEN` to every request and passes
// everything else through unchanged (the Host and Origin headers too, so the suite's DNS-rebinding
// checks reach switchyard's own guard). The conformance runner cannot send headers of its own;
// this lets it test switchyard's token-protected HTTP front.
//
//   node auth-proxy.mjs TARGET_PORT TOKEN_FILE
//
// Listens on an ephemeral 127.0.0.1 port and prints it on stdout (one line), then serves until
// stdin closes. The token is read from a file so it never appears in a process list.
import http from "node:http";
import { readFileSync } from "node:fs";

const [targetPort, tokenFile] = process.argv.slice(2);
if (!targetPort || !tokenFile) {
  process.stderr.write("usage: node auth-proxy.mjs TARGET_PORT TOKEN_FILE\n");
  process.exit(2);
}
const token = readFileSync(tokenFile, "utf8").trim();

const server = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${token}` };
  const upstream = http.request(
    { host: "127.0.0.1", port: Number(targetPort), method: req.method, path: req.url, headers },
    (up) => {
      res.writeHead(up.statusCode, up.statusMessage, up.headers);
      up.pipe(res);
    },
  );
  upstream.on("error", (e) => {
    if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" });
    res.end(`auth-proxy: ${e.message}\n`);
  });
  // The client closing its side (a cut SSE stream) closes ours to switchyard too.
  res.on("close", () => upstream.destroy());
  req.pipe(upstream);
});
server.listen(0, "127.0.0.1", () => process.stdout.write(`${server.address().port}\n`));
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
