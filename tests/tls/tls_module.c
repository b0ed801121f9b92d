/* tls_module — a module with a thread-local, loaded by tls_threads with
 * dlopen after its threads exist: its TLS is dynamic (__tls_get_addr), made
 * per thread on first use from the module's image (42). Built again as
 * tls_module_ie with -ftls-model=initial-exec: static TLS, which glibc
 * copies into each thread it lists as the module loads. */
static __thread int value = 42;
int tls_module_get(void) { return value; }
void tls_module_set(int v) { value = v; }
